package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/httpapi/apitypes"

	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestShardObserverLatencies(t *testing.T) {
	m := testMetrics(t)
	o := newShardObserver(m, "n1")
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := apitypes.Health{Status: apitypes.StatusHealthy}
	snap := func(ms int, s0, s1 apitypes.Shard) {
		s0.Shard, s1.Shard = 0, 1
		o.observe(at(ms), []apitypes.Shard{s0, s1}, h, map[string]int{"pending": 2})
	}
	owned := func(owner string, epoch uint64) apitypes.Shard {
		return apitypes.Shard{Owner: owner, Epoch: epoch, State: "owned", Valid: true}
	}
	// Shard 0: n2 fails (invalid at 100 ms), n1 granted at 900 ms, acting at 1000 ms.
	// Shard 1: n1 drains it: revoking at 100 ms, n3 owns it at 300 ms.
	snap(0, owned("n2", 1), apitypes.Shard{Owner: "n1", Epoch: 1, State: "owned", Valid: true, Acting: true})
	snap(100, apitypes.Shard{Owner: "n2", Epoch: 1, State: "owned"}, apitypes.Shard{Owner: "n1", Epoch: 1, State: "revoking", Valid: true, Acting: true})
	snap(300, apitypes.Shard{Owner: "n2", Epoch: 1, State: "owned"}, owned("n3", 2))
	snap(900, owned("n1", 2), owned("n3", 2))
	s0 := owned("n1", 2)
	s0.Acting = true
	snap(1000, s0, owned("n3", 2))

	check := func(name string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("ownership changes", testutil.ToFloat64(m.ownershipChanges), 2)
	check("acquired", testutil.ToFloat64(m.acquired), 1)
	check("lost", testutil.ToFloat64(m.lost), 1)
	check("shards owned", testutil.ToFloat64(m.shardsOwned), 1)
	check("jobs pending", testutil.ToFloat64(m.jobs.WithLabelValues("pending")), 2)
	check("planned moves", testutil.ToFloat64(m.moves.WithLabelValues("planned")), 1)
	check("failover moves", testutil.ToFloat64(m.moves.WithLabelValues("failover")), 1)
	check("other moves", testutil.ToFloat64(m.moves.WithLabelValues("other")), 0)
	out := gather(t, m)
	for _, want := range []string{
		"tenure_failover_seconds_sum 0.8\n", "tenure_failover_seconds_count 1\n",
		"tenure_handoff_seconds_sum 0.2\n", "tenure_handoff_seconds_count 1\n",
		"tenure_commit_to_acting_seconds_sum 0.1", "tenure_commit_to_acting_seconds_count 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestShardObserverLease(t *testing.T) {
	m := testMetrics(t)
	o := newShardObserver(m, "n1")
	t0 := time.Unix(1000, 0)
	for i, h := range []apitypes.Health{
		{Status: apitypes.StatusHealthy, LastRenewal: t0, LeaseRemainingMS: 900},
		{Status: apitypes.StatusHealthy, LastRenewal: t0.Add(250 * time.Millisecond), LeaseRemainingMS: 900},
		{Status: apitypes.StatusDegraded, LastRenewal: t0.Add(250 * time.Millisecond), Reasons: []string{"lease renewals failing (2 in a row)"}},
		{Status: apitypes.StatusUnhealthy, LastRenewal: t0.Add(250 * time.Millisecond), Reasons: []string{"lease expired: last renewal 1s ago"}},
	} {
		o.observe(t0.Add(time.Duration(i)*time.Second), nil, h, nil)
	}
	if got := testutil.ToFloat64(m.renewalFailures); got != 1 {
		t.Errorf("renewal failures = %v, want 1 (one failing streak)", got)
	}
	if got := testutil.ToFloat64(m.health.WithLabelValues(apitypes.StatusUnhealthy)); got != 1 {
		t.Errorf("unhealthy gauge = %v", got)
	}
	if out := gather(t, m); !strings.Contains(out, "tenure_lease_renewal_interval_seconds_sum 0.25\n") {
		t.Errorf("renewal interval missing:\n%s", out)
	}
}

func testMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func gather(t *testing.T, m *metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestShardObserverLoad: the node's total load and its 3 hottest shards
// are exported; a shard it no longer holds drops out.
func TestShardObserverLoad(t *testing.T) {
	m := testMetrics(t)
	o := newShardObserver(m, "n1")
	h := apitypes.Health{Status: apitypes.StatusHealthy}
	f := func(v float64) *float64 { return &v }
	shards := []apitypes.Shard{
		{Shard: 0, Owner: "n1", Load: f(5)}, {Shard: 1, Owner: "n1", Load: f(40)}, {Shard: 2, Owner: "n1", Load: f(1)},
		{Shard: 3, Owner: "n1", Load: f(9)}, {Shard: 4, Owner: "n2", Load: f(99)}, {Shard: 5, Owner: "n1"},
	}
	o.observe(time.Unix(1, 0), shards, h, nil)
	if got := testutil.ToFloat64(m.load); got != 55 {
		t.Fatalf("load %v, want 55", got)
	}
	out := gather(t, m)
	for _, want := range []string{`tenure_hot_shard_load{shard="1"} 40`, `tenure_hot_shard_load{shard="3"} 9`, `tenure_hot_shard_load{shard="0"} 5`} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `shard="2"`) || strings.Contains(out, `shard="4"`) {
		t.Errorf("metrics show a shard that is not among n1's 3 hottest")
	}
	shards[1].Owner = "n2"
	o.observe(time.Unix(2, 0), shards, h, nil)
	if out := gather(t, m); strings.Contains(out, `shard="1"`) || !strings.Contains(out, `tenure_hot_shard_load{shard="2"} 1`) {
		t.Errorf("after s1 moved away:\n%s", out)
	}
}

// countingBackend is the part of a Backend the metrics sampler reads, with
// a count of full shard-table reads; gen < 0 makes it a plain Backend.
type countingBackend struct {
	Backend // nil: the sampler calls nothing else
	mu      sync.Mutex
	shards  []apitypes.Shard
	gen     uint64
	reads   int
	samples int
}

func (b *countingBackend) Shards() []apitypes.Shard {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	return slices.Clone(b.shards)
}

func (b *countingBackend) Health() apitypes.Health {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples++
	return apitypes.Health{Status: apitypes.StatusHealthy}
}

func (b *countingBackend) Jobs(JobQuery) []apitypes.Job { return nil }

func (b *countingBackend) counts() (reads, samples int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads, b.samples
}

type changeBackend struct{ *countingBackend }

func (b changeBackend) ShardsGeneration() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

func (b changeBackend) Loads() []apitypes.ShardLoad { return nil }

// TestObserveShardsReadsTableOnChange: the sampler reads a ChangeBackend's
// shard table once, then only when ShardsGeneration moves, while it
// samples health every interval; a plain Backend's table every interval.
func TestObserveShardsReadsTableOnChange(t *testing.T) {
	for _, change := range []bool{true, false} {
		t.Run(fmt.Sprintf("change=%v", change), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := testMetrics(t)
				cb := &countingBackend{gen: 1, shards: []apitypes.Shard{{Shard: 0, Owner: "n2", Epoch: 1, State: "owned", Valid: true}}}
				var b Backend = cb
				if change {
					b = changeBackend{cb}
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); observeShards(ctx, b, "n1", m, 100*time.Millisecond) }()
				time.Sleep(time.Second + time.Millisecond)
				synctest.Wait()
				reads, samples := cb.counts()
				if samples != 11 {
					t.Errorf("%d health samples in 1 s at 100 ms, want 11", samples)
				}
				wantReads := 11
				if change {
					wantReads = 1
				}
				if reads != wantReads {
					t.Errorf("%d shard-table reads at rest, want %d", reads, wantReads)
				}
				// The node acquires shard 0: its generation moves.
				cb.mu.Lock()
				cb.shards[0].Owner, cb.shards[0].Epoch, cb.shards[0].Acting = "n1", 2, true
				cb.gen++
				cb.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if reads, _ := cb.counts(); change && reads != 2 {
					t.Errorf("%d shard-table reads after one change, want 2", reads)
				}
				if got := testutil.ToFloat64(m.shardsOwned); got != 1 {
					t.Errorf("shards owned = %v after the change, want 1", got)
				}
				if got := testutil.ToFloat64(m.acquired); got != 1 {
					t.Errorf("acquired = %v, want 1", got)
				}
				cancel()
				<-done
			})
		})
	}
}
