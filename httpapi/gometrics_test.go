package httpapi

import (
	"regexp"
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// TestGoMetricsBridge: what raft and memberlist report through go-metrics'
// global functions reaches the registry under the table's names, in base
// units; legacy per-peer keys are dropped silently, unknown keys counted.
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
	gometrics.IncrCounter([]string{"raft", "apply"}, 3)
	gometrics.SetGauge([]string{"memberlist", "health", "score"}, 2)
	gometrics.AddSample([]string{"raft", "commitTime"}, 5) // ms
	gometrics.MeasureSinceWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, time.Now(), []gometrics.Label{{Name: "peer_id", Value: "n2"}})
	gometrics.MeasureSince([]string{"raft", "replication", "appendEntries", "rpc", "n2"}, time.Now()) // legacy copy
	gometrics.SetGaugeWithLabels([]string{"memberlist", "node", "instances"}, 4, []gometrics.Label{{Name: "node_state", Value: "alive"}})
	gometrics.SetGaugeWithLabels([]string{"memberlist", "node", "instances"}, 1, []gometrics.Label{{Name: "node_state", Value: "weird"}})
	gometrics.IncrCounter([]string{"raft", "somethingNew"}, 1)
	out := gather(t, m)
	for _, want := range []string{
		"tenure_raft_apply_total 3\n",
		"tenure_memberlist_health_score 2\n",
		"tenure_raft_commit_duration_seconds_sum 0.005",
		"tenure_raft_commit_duration_seconds_count 1\n",
		"tenure_raft_replication_append_entries_duration_seconds_count 1\n",
		`tenure_memberlist_nodes{state="alive"} 4` + "\n",
		`tenure_memberlist_nodes{state="dead"} 0` + "\n",
		`tenure_memberlist_nodes{state="other"} 1` + "\n",
		"tenure_gometrics_unmapped_total 1\n",
		"tenure_control_term 0\n",
		"go_goroutines",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out, "n2") {
		t.Errorf("a follower id leaked into a series:\n%s", out)
	}
}

// TestBridgeTableLint: every bridged series passes promlint (the rules of
// `promtool check metrics`), is snake_case and unique, and its help text
// is more than its name.
func TestBridgeTableLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, cs, err := newBridgeSink(bridgeTable)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(cs...)
	// Every series present, histograms included (they appear lazily).
	for _, c := range b.series {
		if _, _, h := c.with(c.labelValue(nil)); h != nil {
			h.Observe(0.001)
		}
	}
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs := mustGather(t, reg)
	if got := len(mfs); got < len(bridgeTable) {
		t.Fatalf("%d families gathered, want at least the table's %d", got, len(bridgeTable))
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	snake := regexp.MustCompile(`^tenure_[a-z0-9]+(_[a-z0-9]+)*$`)
	names := map[string]bool{}
	for _, s := range bridgeTable {
		if !snake.MatchString(s.name) {
			t.Errorf("%s: %q is not snake_case tenure_*", s.key, s.name)
		}
		if names[s.name] {
			t.Errorf("%q twice", s.name)
		}
		names[s.name] = true
		if len(strings.Fields(s.help)) < 4 {
			t.Errorf("%s: help %q says too little", s.name, s.help)
		}
		if got := BridgedSeries()[s.name]; got == "" {
			t.Errorf("%s: not in BridgedSeries", s.name)
		}
		if s.kind == bridgeHistogram && s.buckets == nil && !strings.HasSuffix(s.name, "_seconds") {
			t.Errorf("%s: a timing histogram's name must end in _seconds", s.name)
		}
	}
}

func mustGather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestBridgeSinkUnknownKeyCounted: a key outside the table is dropped and
// counted, never exported under a made-up name.
func TestBridgeSinkUnknownKeyCounted(t *testing.T) {
	b, _, err := newBridgeSink(bridgeTable)
	if err != nil {
		t.Fatal(err)
	}
	b.IncrCounter([]string{"raft", "newThing"}, 1)
	b.AddSample([]string{"raft", "replication", "heartbeat", "n3"}, 1) // legacy: ignored, not counted
	if got := testutil.ToFloat64(b.unmapped); got != 1 {
		t.Fatalf("unmapped = %v, want 1", got)
	}
	if k := b.lastUnmapped.Load(); k == nil || *k != "raft.newThing" {
		t.Fatalf("last unmapped = %v", k)
	}
	if _, _, err := newBridgeSink(append(bridgeTable[:1:1], bridgeTable[0])); err == nil {
		t.Fatal("a duplicate key was accepted")
	}
}
