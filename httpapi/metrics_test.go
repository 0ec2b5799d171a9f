package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/tenurehq/tenure/httpapi/apitypes"

	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
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

func TestGoMetricsBridge(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := BridgeGoMetrics(reg); err != nil {
		t.Fatal(err)
	}
	// raft and memberlist emit through go-metrics' global functions.
	gometrics.IncrCounter([]string{"raft", "apply"}, 3)
	gometrics.SetGauge([]string{"memberlist", "health", "score"}, 0)
	out := gather(t, m)
	for _, want := range []string{"tenure_raft_apply 3", "tenure_memberlist_health_score 0", "go_goroutines"} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
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
