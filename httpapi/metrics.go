package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// latencyBuckets spans 10 ms to ~40 s: handoffs take a few commits,
// failovers a lease plus detection.
var latencyBuckets = prometheus.ExponentialBuckets(0.01, 2, 13)

// metrics are the API's Prometheus metrics, fed by the shard observer
// (observeShards).
type metrics struct {
	gatherer prometheus.Gatherer

	ownershipChanges prometheus.Counter
	moves            *prometheus.CounterVec
	acquired         prometheus.Counter
	lost             prometheus.Counter
	failover         prometheus.Histogram
	handoff          prometheus.Histogram
	commitToActing   prometheus.Histogram
	renewalInterval  prometheus.Histogram
	renewalFailing   prometheus.Gauge
	renewalFailures  prometheus.Counter
	leaseRemaining   prometheus.Gauge
	replicaHalted    prometheus.Gauge
	shardsOwned      prometheus.Gauge
	shardsUnowned    prometheus.Gauge
	jobs             *prometheus.GaugeVec
	queueFull        prometheus.Counter
	health           *prometheus.GaugeVec
	load             prometheus.Gauge
	hotShards        *prometheus.GaugeVec
	httpRefused      *prometheus.CounterVec
}

// browserRefused counts a request the browser guard refused.
func (m *metrics) browserRefused(reason string) { m.httpRefused.WithLabelValues(reason).Inc() }

// The causes of tenure_shard_moves_total.
const (
	movePlanned  = "planned"
	moveFailover = "failover"
	moveOther    = "other"
)

var moveCauses = []string{movePlanned, moveFailover, moveOther}

// newMetrics registers the metrics on reg.
func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{gatherer: reg}
	var cs []prometheus.Collector
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenure", Name: name, Help: help})
		cs = append(cs, c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tenure", Name: name, Help: help})
		cs = append(cs, g)
		return g
	}
	hist := func(name, help string) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "tenure", Name: name, Help: help, Buckets: latencyBuckets})
		cs = append(cs, h)
		return h
	}
	m.ownershipChanges = counter("ownership_changes_total", "Committed owner or epoch changes this node observed (any shard).")
	m.moves = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenure", Name: "shard_moves_total",
		Help: "New committed owners this node observed, by cause: planned (the old owner was revoking: drain, rebalance, pin, load), failover (the shard had lost its valid owner: expired, restarted, left), other (neither seen, e.g. the node missed the middle state)."}, []string{"cause"})
	for _, c := range moveCauses {
		m.moves.WithLabelValues(c)
	}
	m.acquired = counter("shards_acquired_total", "Times this node started acting as owner of a shard.")
	m.lost = counter("shards_lost_total", "Times this node stopped acting as owner of a shard.")
	m.failover = hist("failover_seconds", "Unplanned moves: time from this node seeing a shard lose its valid owner (liveness expired, released) to seeing the next grant committed.")
	m.handoff = hist("handoff_seconds", "Planned moves: time from this node seeing a shard revoked (drain, rebalance) to seeing the next owner committed.")
	m.commitToActing = hist("commit_to_acting_seconds", "On the new owner: time from seeing its grant committed to acting on the shard.")
	m.renewalInterval = hist("lease_renewal_interval_seconds", "Time between successive lease renewals of this node (renewal period plus commit latency).")
	m.renewalFailing = gauge("lease_renewal_failing", "1 while this node's lease renewals are failing.")
	m.renewalFailures = counter("lease_renewal_failures_total", "Times this node's lease renewals started failing.")
	m.leaseRemaining = gauge("lease_remaining_seconds", "How long this node may act without another renewal.")
	m.replicaHalted = gauge("replica_halted_index", "The log index at which this node's ledger replica stopped applying (a committed entry its binary cannot read; docs/upgrades.md); 0 while it applies.")
	m.shardsOwned = gauge("shards_owned", "Shards this node acts on.")
	m.shardsUnowned = gauge("shards_unowned", "Shards without a valid committed owner, as this node sees them.")
	m.jobs = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tenure", Name: "jobs", Help: "Jobs by state, as this node's replica shows them."}, []string{"state"})
	m.queueFull = counter("job_enqueues_refused_total", "Job enqueues this node's API refused because the shard already held its cap of pending jobs (--max-pending-jobs; HTTP 429 queue_full).")
	m.health = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tenure", Name: "health_status", Help: "1 for this node's current health status (healthy, degraded, unhealthy)."}, []string{"status"})
	m.load = gauge("load", "Total load this node reports for the shards it owns (node.ReportLoad; 0 when it reports none).")
	m.hotShards = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tenure", Name: "hot_shard_load",
		Help: "Load of this node's hottest shards (at most 3 series), as it reports them."}, []string{"shard"})
	m.httpRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenure", Name: "http_refused_total",
		Help: "HTTP requests refused before authentication by reason: unknown_host (Host not allowed: DNS rebinding), foreign_origin, unsupported_media_type (a state-changing request without Content-Type: application/json)."}, []string{"reason"})
	for _, r := range []string{"unknown_host", "foreign_origin", "unsupported_media_type"} {
		m.httpRefused.WithLabelValues(r) // every reason exported from the start
	}
	cs = append(cs, m.jobs, m.health, m.hotShards, m.moves, m.httpRefused)
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("httpapi: metrics: %w (one registry per handler)", err)
		}
	}
	return m, nil
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler { return registryHandler(m.gatherer) }

func registryHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// observedShard is what the observer last saw of a shard.
type observedShard struct {
	owner    string
	epoch    uint64
	state    string
	valid    bool
	acting   bool
	lostAt   time.Time // when it lost its valid owner (zero: has one)
	revokeAt time.Time // when it was first seen revoking
	grantAt  time.Time // when this node saw itself granted it (not yet acting)
}

// shardObserver derives ownership-latency metrics by diffing successive
// snapshots of the node's shard table. It is not safe for concurrent use.
type shardObserver struct {
	m           *metrics
	self        string
	prev        map[uint32]observedShard
	owned       int // shards acting on, in prev
	unowned     int // shards without a valid owner, in prev
	lastRenewal time.Time
	failing     bool
}

func newShardObserver(m *metrics, self string) *shardObserver {
	return &shardObserver{m: m, self: self, prev: map[uint32]observedShard{}}
}

// observe takes one snapshot taken at now.
func (o *shardObserver) observe(now time.Time, shards []apitypes.Shard, h apitypes.Health, jobCounts map[string]int) {
	o.observeTable(now, shards)
	o.observeLoad(loadsOf(shards, o.self))
	o.observeHealth(h, jobCounts)
}

// observeTable diffs the shard table taken at now against the last one.
func (o *shardObserver) observeTable(now time.Time, shards []apitypes.Shard) {
	o.owned, o.unowned = 0, 0
	for _, s := range shards {
		o.observeShard(now, s)
		o.count(o.prev[s.Shard], 1)
	}
	o.m.shardsOwned.Set(float64(o.owned))
	o.m.shardsUnowned.Set(float64(o.unowned))
}

// observeShards diffs the shards that changed since the last table or
// shards taken (ShardFeedBackend) against what it saw of them.
func (o *shardObserver) observeShards(now time.Time, shards []apitypes.Shard) {
	for _, s := range shards {
		if p, seen := o.prev[s.Shard]; seen {
			o.count(p, -1)
		}
		o.observeShard(now, s)
		o.count(o.prev[s.Shard], 1)
	}
	o.m.shardsOwned.Set(float64(o.owned))
	o.m.shardsUnowned.Set(float64(o.unowned))
}

// count adds d times s's part to the owned (acting) and unowned counts.
func (o *shardObserver) count(s observedShard, d int) {
	if s.acting {
		o.owned += d
	}
	if s.state == "unowned" || !s.valid {
		o.unowned += d
	}
}

// observeShard diffs one shard taken at now against what was seen of it.
func (o *shardObserver) observeShard(now time.Time, s apitypes.Shard) {
	cur := observedShard{owner: s.Owner, epoch: s.Epoch, state: s.State, valid: s.Valid, acting: s.Acting}
	hasOwner := s.State != "unowned" && s.Valid
	p, seen := o.prev[s.Shard]
	if !seen {
		// First sight: an unowned or revoking shard is timed from now (a
		// full re-read of the table used to start that clock at the next
		// sample; re-observing a shard that did not change is a no-op,
		// so reading only the changed shards is the same).
		if !hasOwner {
			cur.lostAt = now
		}
		if s.State == "revoking" {
			cur.revokeAt = now
		}
		o.prev[s.Shard] = cur
		return
	}
	cur.lostAt, cur.revokeAt, cur.grantAt = p.lostAt, p.revokeAt, p.grantAt
	if !hasOwner && cur.lostAt.IsZero() {
		cur.lostAt = now
	}
	if s.State == "revoking" && cur.revokeAt.IsZero() {
		cur.revokeAt = now
	}
	if s.Epoch != p.epoch || s.Owner != p.owner {
		o.m.ownershipChanges.Inc()
	}
	if hasOwner && s.Epoch != p.epoch {
		switch {
		case !cur.revokeAt.IsZero():
			o.m.handoff.Observe(now.Sub(cur.revokeAt).Seconds())
			o.m.moves.WithLabelValues(movePlanned).Inc()
		case !cur.lostAt.IsZero():
			o.m.failover.Observe(now.Sub(cur.lostAt).Seconds())
			o.m.moves.WithLabelValues(moveFailover).Inc()
		default:
			o.m.moves.WithLabelValues(moveOther).Inc()
		}
		cur.lostAt, cur.revokeAt = time.Time{}, time.Time{}
		if s.State == "revoking" { // already revoked again: the next handoff is timed from now
			cur.revokeAt = now
		}
		if s.Owner == o.self {
			cur.grantAt = now
		}
	}
	if s.Acting && !p.acting {
		o.m.acquired.Inc()
		if !cur.grantAt.IsZero() {
			o.m.commitToActing.Observe(now.Sub(cur.grantAt).Seconds())
		}
		cur.grantAt = time.Time{}
	}
	if !s.Acting && p.acting {
		o.m.lost.Inc()
	}
	o.prev[s.Shard] = cur
}

// observeHealth sets the lease, health and job metrics.
func (o *shardObserver) observeHealth(h apitypes.Health, jobCounts map[string]int) {
	o.m.replicaHalted.Set(float64(h.ReplicaHaltedAt))
	if !h.LastRenewal.IsZero() && h.LastRenewal.After(o.lastRenewal) {
		if !o.lastRenewal.IsZero() {
			o.m.renewalInterval.Observe(h.LastRenewal.Sub(o.lastRenewal).Seconds())
		}
		o.lastRenewal = h.LastRenewal
	}
	failing := false
	for _, r := range h.Reasons {
		if strings.Contains(r, "renewal") || strings.Contains(r, "lease expired") {
			failing = true
		}
	}
	if failing && !o.failing {
		o.m.renewalFailures.Inc()
	}
	o.failing = failing
	o.m.renewalFailing.Set(b2f(failing))
	o.m.leaseRemaining.Set(float64(h.LeaseRemainingMS) / 1000)
	for _, st := range []string{apitypes.StatusHealthy, apitypes.StatusDegraded, apitypes.StatusUnhealthy} {
		o.m.health.WithLabelValues(st).Set(b2f(h.Status == st))
	}
	for _, st := range apitypes.JobStates {
		o.m.jobs.WithLabelValues(st).Set(float64(jobCounts[st]))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observeShards runs the observer every interval until ctx ends.
// self is the node's id. A ChangeBackend's shard table is read only when
// its ShardsGeneration moved (at rest: never); the health, the loads of
// the node's own shards and (every 10th sample) the job counts are read
// every time.
func observeShards(ctx context.Context, n Backend, self string, m *metrics, interval time.Duration) {
	o := newShardObserver(m, self)
	t := time.NewTicker(interval)
	defer t.Stop()
	cb, _ := n.(ChangeBackend)
	fb, _ := n.(ShardFeedBackend)
	var gen uint64
	var nextTable time.Time // no full table read before (tableBudget)
	counts := map[string]int{}
	for i := 0; ; i++ {
		if i%10 == 0 { // counting jobs costs more than reading shards
			counts = map[string]int{}
			for _, j := range n.Jobs(JobQuery{}) {
				counts[j.State]++
			}
		}
		now := time.Now()
		switch {
		case cb == nil:
			shards := n.Shards()
			o.observeTable(now, shards)
			o.observeLoad(loadsOf(shards, self))
		default:
			g := cb.ShardsGeneration()
			if fb != nil && i > 0 && gen != 0 && g != gen {
				// Only the shards that changed since the last read.
				if ng, shards, ok := fb.ShardsSince(gen); ok {
					o.observeShards(now, shards)
					g, gen = ng, ng
				}
			}
			if i == 0 || g == 0 || (g != gen && !now.Before(nextTable)) {
				gen = g
				o.observeTable(now, n.Shards())
				nextTable = time.Now().Add(tableBudget(time.Since(now)))
			}
			o.observeLoad(cb.Loads())
		}
		o.observeHealth(n.Health(), counts)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tableBudget is how long the sampler waits after a full shard-table read
// that took took (wall time) before the next one: 19·took, so the reads
// take at most 5 % of the time. On a node with CPU to spare a read of
// 4,096 shards takes a millisecond or two and every ObserveInterval sample
// may read the table as before; on a starved machine a read takes longer
// and the sampler backs off — before, while ownership kept changing (100
// agents starting on two cores), this read was the largest cost of every
// member (perf: 24 % of a member's CPU; docs/benchmarks.md), which starved
// the voters further. Durations the table read measures (handoff,
// failover, commit → acting) are then sampled that much more coarsely.
func tableBudget(took time.Duration) time.Duration { return 19 * max(took, 0) }

// loadsOf is the loads of the shards self owns in shards.
func loadsOf(shards []apitypes.Shard, self string) []apitypes.ShardLoad {
	var loads []apitypes.ShardLoad
	for _, s := range shards {
		if s.Load != nil && s.Owner == self {
			loads = append(loads, apitypes.ShardLoad{Shard: s.Shard, Load: *s.Load})
		}
	}
	return loads
}

// observeLoad sets the load gauges from the loads of the shards this node
// owns: the total, and the hottest 3 by shard label (older labels are
// dropped, so the series stay few). It sorts loads.
func (o *shardObserver) observeLoad(loads []apitypes.ShardLoad) {
	total := 0.0
	for _, l := range loads {
		total += l.Load
	}
	slices.SortFunc(loads, func(a, b apitypes.ShardLoad) int {
		return cmp.Or(cmp.Compare(b.Load, a.Load), cmp.Compare(a.Shard, b.Shard))
	})
	o.m.load.Set(total)
	o.m.hotShards.Reset()
	for _, l := range loads[:min(len(loads), 3)] {
		o.m.hotShards.WithLabelValues(strconv.FormatUint(uint64(l.Shard), 10)).Set(l.Load)
	}
}
