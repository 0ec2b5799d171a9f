package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
)

func init() {
	registerBench("failover", "kill -9 / restart / drain the acting owner of a shard in a real agent cluster; time until the successor acts", runBenchFailover)
}

// failoverOptions are the parsed flags of `tenure bench failover`.
type failoverOptions struct {
	nodes      int
	runs       int
	profile    string
	mode       string
	json       bool
	partitions int
	tick       time.Duration
	tickSample time.Duration // agents' --tick-sample (0: every tick is a sample)
	seed       uint64
	dir        string
	agentBin   string
	lease      time.Duration
	down       time.Duration
	// fenced puts every partition under fenced takeover (bench_failover_fenced.go).
	fenced      bool
	fencedAfter time.Duration
	// burn is how many CPU-burning processes run beside the cluster
	// during the measured runs (bench_failover_phases.go).
	burn int
}

func parseFailoverFlags(args []string, stderr io.Writer) (failoverOptions, error) {
	var o failoverOptions
	fs := flag.NewFlagSet("bench failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.nodes, "nodes", 5, "agent processes (3 of them form the control group)")
	fs.IntVar(&o.runs, "runs", 20, "failovers (or drains) to measure")
	fs.StringVar(&o.profile, "profile", "default", "lease profile: fast, default or safe")
	fs.StringVar(&o.mode, "mode", "crash", "crash (kill -9 the owner), restart (kill -9 and restart it at once with the same identity) or drain (planned handoff)")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object (progress goes to stderr)")
	fs.IntVar(&o.partitions, "partitions", 32, "shards in the benchmark cluster")
	fs.DurationVar(&o.tick, "tick", 10*time.Millisecond, "demo workload tick period: the resolution of 'acting' (see -tick-sample)")
	fs.DurationVar(&o.tickSample, "tick-sample", -1, "demo workload sample period below -tick: acting's start and stop are seen to within it (default: 1ms in drain mode, where the gap is milliseconds; else -tick)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for shard choice and kill phase (0: random)")
	fs.StringVar(&o.dir, "dir", "", "parent of the agents' data dirs and logs (default: a temp dir, removed afterwards)")
	fs.StringVar(&o.agentBin, "agent-bin", "", "tenure binary to run agents with (default: this executable)")
	fs.DurationVar(&o.down, "down", 0, "restart mode: how long the killed agent stays down before it restarts (0: at once); then restart→acting is measured")
	fs.IntVar(&o.burn, "burn", 0, "run this many CPU-burning processes (busy loops) beside the cluster during the measured runs, to measure under load")
	fencedFlags(fs, &o)
	if err := cli.ParseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench failover: unexpected arguments %q", fs.Args())
	}
	if err := o.checkFenced(); err != nil {
		return o, err
	}
	cfg, err := profileConfig(o.profile)
	if err != nil {
		return o, fmt.Errorf("bench failover: %w", err)
	}
	o.lease = cfg.Lease
	switch {
	case o.mode != "crash" && o.mode != "restart" && o.mode != "drain":
		return o, fmt.Errorf("bench failover: -mode %q: want crash, restart or drain", o.mode)
	case o.nodes < 3 || o.nodes > 64:
		return o, fmt.Errorf("bench failover: -nodes %d: want 3..64 (the control group needs 3)", o.nodes)
	case o.runs < 1 || o.runs > 10_000:
		return o, fmt.Errorf("bench failover: -runs %d: want 1..10000", o.runs)
	case o.partitions < o.nodes || o.partitions > 1<<16:
		return o, fmt.Errorf("bench failover: -partitions %d: want %d (nodes)..%d", o.partitions, o.nodes, 1<<16)
	case o.tick < time.Millisecond || o.tick > time.Second:
		return o, fmt.Errorf("bench failover: -tick %v: want 1ms..1s", o.tick)
	case o.tickSample >= 0 && o.tickSample != 0 && (o.tickSample < time.Millisecond || o.tickSample > o.tick):
		return o, fmt.Errorf("bench failover: -tick-sample %v: want 0 or 1ms..-tick", o.tickSample)
	case o.down < 0 || o.down > 10*time.Minute:
		return o, fmt.Errorf("bench failover: -down %v: want 0..10m", o.down)
	case o.down > 0 && o.mode != "restart":
		return o, fmt.Errorf("bench failover: -down %v needs -mode restart", o.down)
	case o.burn < 0 || o.burn > maxBurners:
		return o, fmt.Errorf("bench failover: -burn %d: want 0..%d", o.burn, maxBurners)
	}
	if o.tickSample < 0 {
		o.tickSample = 0
		if o.mode == "drain" && o.tick > time.Millisecond {
			o.tickSample = time.Millisecond
		}
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	return o, nil
}

// failoverSummary is `tenure bench failover --json`. The first eight fields
// match bench/peers (etcd) so the two can be divided.
type failoverSummary struct {
	Mode     string  `json:"mode"`
	Profile  string  `json:"profile"`
	Runs     int     `json:"runs"`
	MinMs    float64 `json:"min_ms"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	Overlaps int     `json:"overlaps"`
	// Measured is what min..max describe: "kill→acting" (crash, restart),
	// "restart→acting" (restart with -down: the restarted agent's first
	// tick on any shard) or "handoff gap" (drain: last tick of the old owner → first tick of
	// the new one, every shard the drained node held).
	Measured    string  `json:"measured"`
	Samples     int     `json:"samples"`
	CommitP50Ms float64 `json:"commit_p50_ms,omitempty"`
	CommitP99Ms float64 `json:"commit_p99_ms,omitempty"`
	// RestartP50Ms (restart mode): kill (with -down: restart) → the
	// restarted agent answering /healthz.
	RestartP50Ms float64 `json:"restart_p50_ms,omitempty"`
	// DownMs (restart mode): how long the killed agent stayed down.
	DownMs int64 `json:"down_ms,omitempty"`
	// DrainCallP50Ms (drain mode): how long POST /v1/drain took.
	DrainCallP50Ms float64 `json:"drain_call_p50_ms,omitempty"`
	// Crash/restart: the victim's control-group role; a killed leader adds
	// a Raft election and the new leader's full lease wait.
	LeaderKills       int       `json:"leader_kills,omitempty"`
	LeaderP50Ms       float64   `json:"leader_p50_ms,omitempty"`
	NonLeaderP50Ms    float64   `json:"non_leader_p50_ms,omitempty"`
	Nodes             int       `json:"nodes"`
	Partitions        int       `json:"partitions"`
	LeaseMs           int64     `json:"lease_ms"`
	TickMs            float64   `json:"tick_ms"`
	TickSampleMs      float64   `json:"tick_sample_ms,omitempty"` // the resolution of acting, when below tick_ms
	WitnessTicks      int       `json:"witness_ticks"`
	WitnessViolations int       `json:"witness_violations"`
	AgentRSSMB        float64   `json:"agent_rss_mb"`
	AgentCPUPct       float64   `json:"agent_cpu_pct"`
	Seed              uint64    `json:"seed"`
	SamplesMs         []float64 `json:"samples_ms"`
	// Fenced: every partition was under fenced takeover (S4 waived), with
	// the leader's FencedAfter (0: the profile's 3 heartbeat periods).
	Fenced        bool    `json:"fenced,omitempty"`
	FencedAfterMs float64 `json:"fenced_after_ms,omitempty"`
	// FencedEarly counts runs whose shard had already moved before the
	// kill (a live owner taken for dead: S4 is waived for fenced shards,
	// and the witness counts the overlap); they are left out of the
	// samples.
	FencedEarly int `json:"fenced_early,omitempty"`
	// Phases (drain mode): where the handoff gap went, per shard
	// (bench_failover_phases.go).
	Phases *phaseSummary `json:"phases,omitempty"`
	// Raft (drain mode): the voters' log writes and the leader's commits
	// over the measured runs, from their own histograms
	// (bench_failover_raft.go).
	Raft *raftLatency `json:"raft,omitempty"`
	// Burn is -burn; LoadAvgMin/Max the 1-minute load average seen at the
	// start of each run; FsyncP50Ms/P99Ms a 4 KiB write+fsync every 20 ms
	// in the agents' parent directory during the runs.
	Burn       int     `json:"burn,omitempty"`
	LoadAvgMin float64 `json:"load_avg_min"`
	LoadAvgMax float64 `json:"load_avg_max"`
	FsyncP50Ms float64 `json:"fsync_p50_ms"`
	FsyncP99Ms float64 `json:"fsync_p99_ms"`
}

// agentWorkspace resolves what a benchmark that starts agent processes
// runs: the agent binary (bin, else this executable) and its working
// directory (dir, created if missing; else a new temporary directory named
// after prefix, which cleanup removes).
func agentWorkspace(bin, dir, prefix string) (string, string, func(), error) {
	cleanup := func() {}
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", "", cleanup, err
		}
		bin = exe
	}
	if dir == "" {
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			return "", "", cleanup, err
		}
		return bin, d, func() { _ = os.RemoveAll(d) }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", cleanup, err
	}
	return bin, dir, cleanup, nil
}

// newWitnessedCluster prepares a bench cluster of agents (not started): its
// workspace (agentWorkspace) and a witness recorder serving the agents'
// ticks on loopback. closeAll stops the agents, then the witness, then
// removes the workspace.
func newWitnessedCluster(o failoverOptions, agentBin, dir, prefix string, progress func(string, ...any)) (c *foCluster, rec *foRecorder, closeAll func(), err error) {
	bin, parent, cleanup, err := agentWorkspace(agentBin, dir, prefix)
	if err != nil {
		return nil, nil, nil, err
	}
	rec = newFoRecorder()
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	wsrv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go wsrv.Serve(wl)
	c = &foCluster{bin: bin, dir: parent, opts: o, witness: "http://" + wl.Addr().String() + "/ticks", log: progress}
	return c, rec, func() {
		c.stopAll()
		_ = wsrv.Close()
		cleanup()
	}, nil
}

func runBenchFailover(ctx context.Context, m *Env, args []string) error {
	o, err := parseFailoverFlags(args, m.Stderr)
	if err != nil {
		return err
	}
	progress := func(format string, a ...any) { fmt.Fprintf(m.Stderr, format+"\n", a...) }
	c, rec, closeAll, err := newWitnessedCluster(o, o.agentBin, o.dir, "tenure-bench-failover-", progress)
	if err != nil {
		return err
	}
	defer closeAll()
	progress("starting %d agents (profile %s, %d shards, tick %v) in %s", o.nodes, o.profile, o.partitions, o.tick, c.dir)
	if err := c.start(ctx); err != nil {
		return err
	}
	if err := c.waitSettled(ctx, rec, 3*time.Minute); err != nil {
		return err
	}
	if err := c.setFenced(ctx); err != nil {
		return err
	}
	rss, cpu := c.idleUsage(ctx, 2*time.Second)
	progress("cluster settled; agents idle at %.0f MiB RSS, %.1f%% CPU each (median)", rss, cpu)

	rng := rand.New(rand.NewPCG(o.seed, 0xfa11))
	s := failoverSummary{Mode: o.mode, Profile: o.profile, Runs: o.runs, Nodes: o.nodes, Partitions: o.partitions,
		LeaseMs: o.lease.Milliseconds(), TickMs: float64(o.tick.Microseconds()) / 1000, TickSampleMs: float64(o.tickSample.Microseconds()) / 1000, AgentRSSMB: rss, AgentCPUPct: cpu, Seed: o.seed,
		Fenced: o.fenced, FencedAfterMs: ms(o.fencedAfter)}
	s.Measured = "kill→acting"
	switch {
	case o.mode == "drain":
		s.Measured = "handoff gap"
	case o.down > 0:
		s.Measured, s.DownMs = "restart→acting", o.down.Milliseconds()
	}
	var commits, restarts, drainCalls, leaderMs, otherMs []float64
	var phases []handoffPhases
	burn, err := startBurner(o.burn)
	if err != nil {
		return err
	}
	defer burn.stop()
	probe, err := startFsyncProbe(c.dir)
	if err != nil {
		return err
	}
	defer probe.finish()
	s.Burn, s.LoadAvgMin = o.burn, math.Inf(1)
	var raftBefore raftSnapshot
	if o.mode == "drain" {
		if raftBefore, err = c.raftSnapshot(ctx); err != nil {
			return fmt.Errorf("bench failover: %w", err)
		}
	}
	for i := range o.runs {
		load := loadAverage()
		s.LoadAvgMin, s.LoadAvgMax = min(s.LoadAvgMin, load), max(s.LoadAvgMax, load)
		r, err := c.oneRun(ctx, rec, rng)
		if err != nil {
			return fmt.Errorf("bench failover: run %d: %w", i+1, err)
		}
		phases = append(phases, r.phases...)
		s.SamplesMs = append(s.SamplesMs, r.samples...)
		if r.overlap {
			s.Overlaps++
		}
		if r.role == "leader" {
			leaderMs = append(leaderMs, r.samples...)
		} else if r.role != "" {
			otherMs = append(otherMs, r.samples...)
		}
		if r.commit > 0 {
			commits = append(commits, ms(r.commit))
		}
		if r.restart > 0 {
			restarts = append(restarts, ms(r.restart))
		}
		if r.drainCall > 0 {
			drainCalls = append(drainCalls, ms(r.drainCall))
		}
		progress("run %3d/%d  %s", i+1, o.runs, r.line)
		if err := c.waitSettled(ctx, rec, 2*time.Minute); err != nil {
			return fmt.Errorf("bench failover: after run %d: %w", i+1, err)
		}
	}
	if o.fenced {
		s.SamplesMs, s.FencedEarly = splitEarly(s.SamplesMs)
		leaderMs, _ = splitEarly(leaderMs)
		otherMs, _ = splitEarly(otherMs)
	}
	sorted := slices.Clone(s.SamplesMs)
	slices.Sort(sorted)
	s.Samples = len(sorted)
	if len(sorted) > 0 {
		s.MinMs, s.MaxMs = sorted[0], sorted[len(sorted)-1]
		s.P50Ms, s.P99Ms = nearestRank(sorted, 0.5), nearestRank(sorted, 0.99)
	}
	slices.Sort(commits)
	s.CommitP50Ms, s.CommitP99Ms = nearestRank(commits, 0.5), nearestRank(commits, 0.99)
	slices.Sort(restarts)
	s.RestartP50Ms = nearestRank(restarts, 0.5)
	slices.Sort(leaderMs)
	slices.Sort(otherMs)
	s.LeaderKills, s.LeaderP50Ms, s.NonLeaderP50Ms = len(leaderMs), nearestRank(leaderMs, 0.5), nearestRank(otherMs, 0.5)
	slices.Sort(drainCalls)
	s.DrainCallP50Ms = nearestRank(drainCalls, 0.5)
	s.WitnessTicks, s.WitnessViolations = rec.check()
	s.Phases = summarizePhases(phases)
	if raftBefore != nil {
		after, err := c.raftSnapshot(ctx)
		if err != nil {
			return fmt.Errorf("bench failover: %w", err)
		}
		r := raftLatencyBetween(raftBefore, after)
		s.Raft = &r
	}
	s.FsyncP50Ms, s.FsyncP99Ms, _ = probe.finish()
	if o.json {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		fmt.Fprintln(m.Stdout, string(b))
		return nil
	}
	tick := o.tick.String()
	if o.tickSample > 0 {
		tick += fmt.Sprintf(" (sampled every %v)", o.tickSample)
	}
	fmt.Fprintf(m.Stdout, "tenure %s, profile %s (lease %v), %d agents, %d shards, tick %s%s\n", s.Mode, s.Profile, o.lease, s.Nodes, s.Partitions, tick, o.fencedNote())
	fmt.Fprintf(m.Stdout, "  %s over %d samples: min %.1f  p50 %.1f  p99 %.1f  max %.1f ms; overlapping runs %d\n",
		s.Measured, s.Samples, s.MinMs, s.P50Ms, s.P99Ms, s.MaxMs, s.Overlaps)
	if len(commits) > 0 {
		fmt.Fprintf(m.Stdout, "  kill→commit (new epoch visible in the API): p50 %.1f  p99 %.1f ms\n", s.CommitP50Ms, s.CommitP99Ms)
	}
	if o.mode != "drain" {
		fmt.Fprintf(m.Stdout, "  victim was the control-group leader in %d runs: p50 %.1f ms then, %.1f ms otherwise\n", s.LeaderKills, s.LeaderP50Ms, s.NonLeaderP50Ms)
	}
	if len(restarts) > 0 && o.down > 0 {
		fmt.Fprintf(m.Stdout, "  down %v, then restart→agent answering /healthz: p50 %.1f ms\n", o.down, s.RestartP50Ms)
	} else if len(restarts) > 0 {
		fmt.Fprintf(m.Stdout, "  kill→restarted agent answering /healthz: p50 %.1f ms\n", s.RestartP50Ms)
	}
	if len(drainCalls) > 0 {
		fmt.Fprintf(m.Stdout, "  POST /v1/drain returned after: p50 %.1f ms\n", s.DrainCallP50Ms)
	}
	if p := s.Phases; p != nil {
		fmt.Fprintf(m.Stdout, "  gap by phase (%d shards), p50 / p99: commit %.1f / %.1f, replicate %.1f / %.1f, act %.1f / %.1f ms\n",
			p.Samples, p.CommitP50Ms, p.CommitP99Ms, p.ReplicateP50Ms, p.ReplicateP99Ms, p.ActP50Ms, p.ActP99Ms)
	}
	if r := s.Raft; r != nil {
		fmt.Fprintf(m.Stdout, "  raft, all entries: log writes (%d, 2 fdatasyncs each) p50 %.2f / p99 %.2f ms; leader commits (%d) p50 %.2f / p99 %.2f ms\n",
			r.StoreLogs, r.StoreLogsP50Ms, r.StoreLogsP99Ms, r.Commits, r.CommitP50Ms, r.CommitP99Ms)
	}
	fmt.Fprintf(m.Stdout, "  load average %.1f..%.1f (%d burners); fsync p50 %.2f, p99 %.2f ms\n", s.LoadAvgMin, s.LoadAvgMax, s.Burn, s.FsyncP50Ms, s.FsyncP99Ms)
	if o.fenced {
		fmt.Fprintf(m.Stdout, "  fenced: %d runs left out, their shard moved before the kill (a live owner taken for dead; the witness counts the overlaps)\n", s.FencedEarly)
	}
	fmt.Fprintf(m.Stdout, "  witness: %d ticks, %d violations; idle agent %.0f MiB RSS, %.1f%% CPU\n", s.WitnessTicks, s.WitnessViolations, s.AgentRSSMB, s.AgentCPUPct)
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// nearestRank is the nearest-rank quantile of sorted samples (0 if none).
func nearestRank(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// foTick is one demo-workload tick as agents POST it to --witness.
type foTick struct {
	Shard    uint32 `json:"shard"`
	Epoch    uint64 `json:"epoch"`
	Node     string `json:"node"`
	Seq      uint64 `json:"seq"`
	UnixNano int64  `json:"unix_nano"`
}

// foRecorder is the benchmark's witness: it stores every tick per shard.
type foRecorder struct {
	mu    sync.Mutex
	ticks map[uint32][]foTick
	total int
}

func newFoRecorder() *foRecorder { return &foRecorder{ticks: map[uint32][]foTick{}} }

func (r *foRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST ticks", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var batch []foTick
	if err := json.Unmarshal(body, &batch); err != nil {
		var one foTick
		if err1 := json.Unmarshal(body, &one); err1 != nil {
			http.Error(w, "want a JSON array of ticks: "+err.Error(), http.StatusBadRequest)
			return
		}
		batch = []foTick{one}
	}
	r.add(batch)
	w.WriteHeader(http.StatusNoContent)
}

func (r *foRecorder) add(batch []foTick) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range batch {
		r.ticks[t.Shard] = append(r.ticks[t.Shard], t)
		r.total++
	}
}

// firstBy returns node's earliest tick after the given time, on any shard.
func (r *foRecorder) firstBy(node string, after int64) (first foTick, found bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ts := range r.ticks {
		for _, t := range ts {
			if t.Node == node && t.UnixNano > after && (!found || t.UnixNano < first.UnixNano) {
				first, found = t, true
			}
		}
	}
	return first, found
}

// shard returns a copy of one shard's ticks, sorted by time.
func (r *foRecorder) shard(s uint32) []foTick {
	r.mu.Lock()
	out := slices.Clone(r.ticks[s])
	r.mu.Unlock()
	sortTicks(out)
	return out
}

func sortTicks(ts []foTick) {
	slices.SortStableFunc(ts, func(a, b foTick) int {
		if a.UnixNano != b.UnixNano {
			if a.UnixNano < b.UnixNano {
				return -1
			}
			return 1
		}
		return int(a.Epoch) - int(b.Epoch)
	})
}

// lastTick returns the time of the newest tick of shard s by node at epoch.
func (r *foRecorder) lastTick(s uint32, node string, epoch uint64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	ok := false
	for _, t := range r.ticks[s] {
		if t.Node == node && t.Epoch == epoch && t.UnixNano > last {
			last, ok = t.UnixNano, true
		}
	}
	return last, ok
}

// check counts S4 violations over everything recorded: ordered by time, a
// shard's epoch never goes back, and one epoch belongs to one node.
func (r *foRecorder) check() (ticks, violations int) {
	r.mu.Lock()
	shards := make([]uint32, 0, len(r.ticks))
	for s := range r.ticks {
		shards = append(shards, s)
	}
	r.mu.Unlock()
	slices.Sort(shards)
	for _, s := range shards {
		ts := r.shard(s)
		ticks += len(ts)
		violations += countViolations(ts)
	}
	return ticks, violations
}

// countViolations counts ticks (sorted by time) that go back to a lower
// epoch than one already seen, or that show a second node at one epoch.
func countViolations(ts []foTick) int {
	n := 0
	var maxEpoch uint64
	owner := map[uint64]string{}
	for _, t := range ts {
		if t.Epoch < maxEpoch {
			n++
		}
		maxEpoch = max(maxEpoch, t.Epoch)
		if o, ok := owner[t.Epoch]; ok && o != t.Node {
			n++
		}
		owner[t.Epoch] = t.Node
	}
	return n
}

// handoff analyses one shard's ticks (sorted by time) around a change
// away from (oldNode, oldEpoch): first is the first tick at a higher epoch,
// last the last tick of the old owner at oldEpoch, overlap whether the old
// owner ticked at or after first.
func handoff(ts []foTick, oldNode string, oldEpoch uint64) (first foTick, last int64, found, overlap bool) {
	for _, t := range ts {
		if t.Epoch > oldEpoch {
			first, found = t, true
			break
		}
	}
	for _, t := range ts {
		if t.Node == oldNode && t.Epoch == oldEpoch {
			last = max(last, t.UnixNano)
		}
	}
	overlap = found && last >= first.UnixNano
	return first, last, found, overlap
}

// foAgent is one agent process of the benchmark cluster.
type foAgent struct {
	id                     string
	gossip, raft, httpAddr string
	cmd                    *exec.Cmd
	exited                 chan struct{}
	logf                   *os.File
}

func (a *foAgent) running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// foCluster runs the agents.
type foCluster struct {
	bin     string
	dir     string
	opts    failoverOptions
	witness string
	log     func(string, ...any)
	agents  []*foAgent
	client  http.Client
}

func freeLoopbackAddrs(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func (c *foCluster) start(ctx context.Context) error {
	c.client = http.Client{Timeout: 5 * time.Second}
	addrs, err := freeLoopbackAddrs(3 * c.opts.nodes)
	if err != nil {
		return err
	}
	for i := range c.opts.nodes {
		c.agents = append(c.agents, &foAgent{
			id:     fmt.Sprintf("bench-%02d", i),
			gossip: addrs[3*i], raft: addrs[3*i+1], httpAddr: addrs[3*i+2],
		})
	}
	for _, a := range c.agents {
		if err := c.spawn(a); err != nil {
			return err
		}
	}
	return nil
}

func (c *foCluster) agentArgs(a *foAgent) []string {
	seeds := []string{c.agents[0].gossip, c.agents[1].gossip, c.agents[2].gossip}
	args := []string{"agent",
		"--node-id", a.id,
		"--data-dir", filepath.Join(c.dir, a.id),
		"--seeds", strings.Join(seeds, ","),
		"--bootstrap-expect", "3",
		"--gossip-addr", a.gossip,
		"--raft-addr", a.raft,
		"--http-addr", a.httpAddr,
		"--profile", c.opts.profile,
		"--partitions", strconv.Itoa(c.opts.partitions),
		"--witness", c.witness,
		"--tick", c.opts.tick.String(),
		"--tick-sample", c.opts.tickSample.String(),
		"--drain-timeout", "5s",
		"--log-format", "json",
		"--log-level", "warn",
	}
	if c.opts.fencedAfter > 0 {
		args = append(args, "--fenced-after", c.opts.fencedAfter.String())
	}
	return args
}

func (c *foCluster) spawn(a *foAgent) error { return spawnAgent(c.bin, c.dir, a, c.agentArgs(a)) }

// spawnAgent starts agent a as `bin args…`, its output appended to
// dir/<id>.log, and closes a.exited when the process is gone.
func spawnAgent(bin, dir string, a *foAgent, args []string) error {
	return spawnAgentWith(bin, dir, a, args, agentProc{})
}

// agentProc is how an agent process is run beyond its arguments.
type agentProc struct {
	// nice > 0 runs it under `nice -n nice` (lower CPU priority).
	nice int
	// env is added to the inherited environment (GOMAXPROCS=1).
	env []string
}

// spawnAgentWith is spawnAgent with p.
func spawnAgentWith(bin, dir string, a *foAgent, args []string, p agentProc) error {
	lf, err := os.OpenFile(filepath.Join(dir, a.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	if p.nice > 0 {
		// nice execs the agent: the process (and its pid) is the agent's.
		cmd = exec.Command("nice", append([]string{"-n", strconv.Itoa(p.nice), bin}, args...)...)
	}
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start agent %s: %w", a.id, err)
	}
	a.cmd, a.logf, a.exited = cmd, lf, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		lf.Close()
		close(done)
	}(a.exited)
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (a *foAgent) kill() {
	if !a.running() {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// stopAgents sends SIGTERM to every running agent at once, then SIGKILL
// to those still running after grace. It reports how long after the
// SIGTERM the last one exited (grace if one had to be killed) and the
// agents that did not exit with status 0 by themselves, as "id: why".
func stopAgents(agents []*foAgent, grace time.Duration) (took time.Duration, unclean []string) {
	t0 := time.Now()
	var stopping []*foAgent
	for _, a := range agents {
		if a.running() {
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			stopping = append(stopping, a)
		}
	}
	deadline := time.After(grace)
wait:
	for _, a := range stopping {
		select {
		case <-a.exited:
		case <-deadline:
			break wait
		}
	}
	took = time.Since(t0)
	for _, a := range stopping {
		if a.running() {
			unclean = append(unclean, a.id+": still running after "+grace.String()+", killed")
			a.kill()
			continue
		}
		if code := a.cmd.ProcessState.ExitCode(); code != 0 {
			unclean = append(unclean, fmt.Sprintf("%s: exit status %d", a.id, code))
		}
	}
	return took, unclean
}

// stopAll stops every agent: SIGTERM, then SIGKILL after 10 s.
func (c *foCluster) stopAll() { stopAgents(c.agents, 10*time.Second) }

func (c *foCluster) get(ctx context.Context, a *foAgent, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.httpAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *foCluster) post(ctx context.Context, a *foAgent, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.httpAddr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json") // the API refuses a state change without it
	cl := http.Client{Timeout: 2 * time.Minute}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// foShard is the part of GET /v1/shards the benchmark reads.
type foShard struct {
	Shard uint32 `json:"shard"`
	Owner string `json:"owner"`
	Epoch uint64 `json:"epoch"`
	State string `json:"state"`
	Valid bool   `json:"valid"`
}

// shards reads the shard table from the first running agent that answers.
func (c *foCluster) shards(ctx context.Context, except string) ([]foShard, error) {
	var last error = errors.New("no agent running")
	for _, a := range c.agents {
		if !a.running() || a.id == except {
			continue
		}
		var out []foShard
		if err := c.get(ctx, a, "/v1/shards", &out); err != nil {
			last = err
			continue
		}
		return out, nil
	}
	return nil, last
}

func (c *foCluster) agent(id string) *foAgent {
	for _, a := range c.agents {
		if a.id == id {
			return a
		}
	}
	return nil
}

// waitSettled waits until every agent runs and answers, every shard is
// validly owned (none revoking) by a running agent, and the witness saw
// every shard's owner tick at its epoch.
func (c *foCluster) waitSettled(ctx context.Context, rec *foRecorder, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	why := "not checked"
	for {
		ok, reason := c.settled(ctx, rec)
		if ok {
			return nil
		}
		why = reason
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster did not settle within %v: %s (agent logs in %s)", limit, why, c.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *foCluster) settled(ctx context.Context, rec *foRecorder) (bool, string) {
	for _, a := range c.agents {
		if !a.running() {
			return false, "agent " + a.id + " exited (see its log)"
		}
		if err := c.get(ctx, a, "/healthz", nil); err != nil {
			return false, a.id + ": " + err.Error()
		}
	}
	sh, err := c.shards(ctx, "")
	if err != nil {
		return false, err.Error()
	}
	if len(sh) != c.opts.partitions {
		return false, fmt.Sprintf("%d shards in the table, want %d", len(sh), c.opts.partitions)
	}
	recent := time.Now().Add(-time.Second).UnixNano()
	owned := map[string]int{}
	for _, s := range sh {
		owned[s.Owner]++
		if s.State != "owned" || !s.Valid || c.agent(s.Owner) == nil {
			return false, fmt.Sprintf("shard %d is %s (valid %v) by %q", s.Shard, s.State, s.Valid, s.Owner)
		}
		if t, ok := rec.lastTick(s.Shard, s.Owner, s.Epoch); !ok || t < recent {
			return false, fmt.Sprintf("shard %d: no recent tick from %s at epoch %d", s.Shard, s.Owner, s.Epoch)
		}
	}
	// A restarted or undrained agent is back in the placement ring (and
	// the rebalance towards it has begun) once it owns a shard again.
	for _, a := range c.agents {
		if owned[a.id] == 0 {
			return false, a.id + " owns no shard yet"
		}
	}
	return true, ""
}

// idleUsage samples the agents' RSS and CPU over window; it returns the
// medians (MiB, percent of one core).
func (c *foCluster) idleUsage(ctx context.Context, window time.Duration) (rssMB, cpuPct float64) {
	var cpu0 []time.Duration
	for _, a := range c.agents {
		cpu0 = append(cpu0, pidCPU(a.cmd.Process.Pid))
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(window):
	}
	wall := time.Since(t0)
	var rss, cpu []float64
	for i, a := range c.agents {
		rss = append(rss, pidRSSMB(a.cmd.Process.Pid))
		cpu = append(cpu, 100*(pidCPU(a.cmd.Process.Pid)-cpu0[i]).Seconds()/wall.Seconds())
	}
	slices.Sort(rss)
	slices.Sort(cpu)
	return nearestRank(rss, 0.5), nearestRank(cpu, 0.5)
}

// foStatus is the part of GET /v1/status the benchmark reads.
type foStatus struct {
	ControlLeader string   `json:"control_leader"`
	Voters        []string `json:"voters"`
}

// role reports id's control-group role as a running agent sees it.
func (c *foCluster) role(ctx context.Context, id string) string {
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		var st foStatus
		if err := c.get(ctx, a, "/v1/status", &st); err != nil {
			continue
		}
		switch {
		case st.ControlLeader == id:
			return "leader"
		case slices.Contains(st.Voters, id):
			return "voter"
		}
		return "member"
	}
	return "?"
}

// foRunResult is one run's outcome.
type foRunResult struct {
	samples   []float64 // ms
	commit    time.Duration
	restart   time.Duration
	drainCall time.Duration
	phases    []handoffPhases // drain mode
	overlap   bool
	line      string
	role      string // the victim's control-group role: leader, voter or member
}

func (c *foCluster) oneRun(ctx context.Context, rec *foRecorder, rng *rand.Rand) (foRunResult, error) {
	var res foRunResult
	sh, err := c.shards(ctx, "")
	if err != nil {
		return res, err
	}
	target := sh[rng.IntN(len(sh))]
	owner := c.agent(target.Owner)
	if owner == nil {
		return res, fmt.Errorf("shard %d owned by unknown node %q", target.Shard, target.Owner)
	}
	if c.opts.mode == "drain" {
		return c.drainRun(ctx, rec, owner, sh)
	}
	// A random phase of the owner's lease: its renewals are periodic, so a
	// delay uniform over one lease hits every phase of the renewal cycle.
	phase := time.Duration(rng.Int64N(int64(c.opts.lease)))
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(phase):
	}
	res.role = c.role(ctx, owner.id)
	killedAt := time.Now()
	owner.kill()
	// Commit: poll a survivor's API for the new epoch.
	// The poller owns commit and commitErr until it closes commitDone.
	var commit time.Duration
	var commitErr error
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		deadline := killedAt.Add(2 * time.Minute)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			var s foShard
			for _, a := range c.agents {
				if a == owner || !a.running() {
					continue
				}
				if err := c.get(ctx, a, fmt.Sprintf("/v1/shards/%d", target.Shard), &s); err == nil && s.Epoch > target.Epoch {
					commit = time.Since(killedAt)
					return
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		commitErr = fmt.Errorf("shard %d: no epoch above %d committed within 2m", target.Shard, target.Epoch)
	}()
	restartAt := killedAt
	if c.opts.mode == "restart" {
		if c.opts.down > 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(c.opts.down):
			}
			restartAt = time.Now()
		}
		if err := c.spawn(owner); err != nil {
			return res, err
		}
		for time.Since(restartAt) < time.Minute {
			if err := c.get(ctx, owner, "/healthz", nil); err == nil {
				res.restart = time.Since(restartAt)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Acting: the first witness tick at a higher epoch (ticks arrive in
	// batches, so wait for it; its timestamp is when it happened). After
	// -down, the restarted agent's first tick on any shard.
	var first foTick
	var found bool
	deadline := time.Now().Add(2 * time.Minute)
	for !found {
		if time.Now().After(deadline) {
			if c.opts.down > 0 {
				return res, fmt.Errorf("restarted %s: no tick within 2m (agent logs in %s)", owner.id, c.dir)
			}
			return res, fmt.Errorf("shard %d: no tick above epoch %d within 2m of the kill (agent logs in %s)", target.Shard, target.Epoch, c.dir)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if c.opts.down > 0 {
			first, found = rec.firstBy(owner.id, restartAt.UnixNano())
		} else {
			first, _, found, _ = handoff(rec.shard(target.Shard), owner.id, target.Epoch)
		}
	}
	<-commitDone
	if commitErr != nil {
		return res, commitErr
	}
	res.commit = commit
	_, last, _, overlap := handoff(rec.shard(target.Shard), owner.id, target.Epoch)
	res.overlap = overlap
	acting := time.Duration(first.UnixNano - restartAt.UnixNano())
	res.samples = []float64{ms(acting)}
	if c.opts.down > 0 {
		res.line = fmt.Sprintf("shard %3d  %s@e%d (%-6s)  kill -9 → commit %7.1f ms; down %v, restart → acting (shard %d @e%d) %7.1f ms  (agent up after %.0f ms)",
			target.Shard, owner.id, target.Epoch, res.role, ms(res.commit), c.opts.down, first.Shard, first.Epoch, ms(acting), ms(res.restart))
	} else {
		res.line = fmt.Sprintf("shard %3d  %s@e%d (%-6s)  phase %5.0f ms  kill -9 → commit %7.1f ms, → %s acting @e%d %7.1f ms",
			target.Shard, owner.id, target.Epoch, res.role, ms(phase), ms(res.commit), first.Node, first.Epoch, ms(acting))
	}
	if c.opts.mode == "restart" && c.opts.down == 0 {
		res.line += fmt.Sprintf("  (restarted agent up after %.0f ms)", ms(res.restart))
	}
	if overlap {
		res.line += fmt.Sprintf("  OVERLAP: old owner ticked %.1f ms after the successor started", ms(time.Duration(last-first.UnixNano)))
	}
	if c.opts.mode == "crash" {
		// Bring the node back for the next run (same identity and data).
		if err := c.spawn(owner); err != nil {
			return res, err
		}
	}
	return res, nil
}

// drainRun drains owner, measures the handoff gap and overlap of every shard
// it held, then undrains it.
func (c *foCluster) drainRun(ctx context.Context, rec *foRecorder, owner *foAgent, sh []foShard) (foRunResult, error) {
	var res foRunResult
	var held []foShard
	for _, s := range sh {
		if s.Owner == owner.id {
			held = append(held, s)
		}
	}
	leader := c.leaderAgent(ctx)
	t0 := time.Now()
	if err := c.post(ctx, owner, "/v1/drain?wait=60s"); err != nil {
		return res, err
	}
	res.drainCall = time.Since(t0)
	// Wait for the witness to report a successor for every held shard.
	deadline := time.Now().Add(time.Minute)
	var gaps []float64
	overlaps := 0
	for {
		gaps, overlaps = gaps[:0], 0
		all := true
		for _, s := range held {
			first, last, found, overlap := handoff(rec.shard(s.Shard), owner.id, s.Epoch)
			if !found {
				all = false
				break
			}
			gaps = append(gaps, ms(time.Duration(first.UnixNano-last)))
			if overlap {
				overlaps++
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("drain of %s: not every shard had a new owner ticking within 1m", owner.id)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	res.samples, res.overlap = gaps, overlaps > 0
	for _, s := range held {
		first, last, _, _ := handoff(rec.shard(s.Shard), owner.id, s.Epoch)
		if p, ok := c.phasesOf(ctx, leader, s.Shard, last, first); ok {
			res.phases = append(res.phases, p)
		}
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	res.line = fmt.Sprintf("drain %s (%d shards): POST took %.0f ms; handoff gap max %.1f ms, p50 %.1f ms; overlapping shards %d",
		owner.id, len(held), ms(res.drainCall), nearestRank(sorted, 1), nearestRank(sorted, 0.5), overlaps)
	if err := c.post(ctx, owner, "/v1/undrain"); err != nil {
		return res, err
	}
	return res, nil
}
