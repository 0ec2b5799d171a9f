package prometheus

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestAlertsFire evaluates each alert's expression with Prometheus' own
// engine over series written as promqltest load blocks (one sample per
// 15 s scrape): it must return a sample for the failure it names and none
// for a healthy cluster. `for:` is not evaluated here.
func TestAlertsFire(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, promqlParser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	exprs := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	const at = 15 * time.Minute
	cases := []struct {
		alert string
		load  string
		fires bool
	}{
		{"TenureNoLeader", `tenure_control_leader{job="t",instance="a"} 0x80
tenure_control_leader{job="t",instance="b"} 0x80`, true},
		{"TenureNoLeader", `tenure_control_leader{job="t",instance="a"} 0x80
tenure_control_leader{job="t",instance="b"} 1x80`, false},
		{"TenureFrequentLeaderChanges", `tenure_raft_leader_transitions_total{job="t",instance="a"} 0+1x80`, true},
		{"TenureFrequentLeaderChanges", `tenure_raft_leader_transitions_total{job="t",instance="a"} 1x80`, false},
		{"TenureFsyncSlow", `tenure_raft_boltdb_store_logs_duration_seconds_bucket{job="t",instance="a",le="0.1"} 0+5x80
tenure_raft_boltdb_store_logs_duration_seconds_bucket{job="t",instance="a",le="0.2"} 0+10x80
tenure_raft_boltdb_store_logs_duration_seconds_bucket{job="t",instance="a",le="+Inf"} 0+10x80`, true},
		{"TenureFsyncSlow", `tenure_raft_boltdb_store_logs_duration_seconds_bucket{job="t",instance="a",le="0.1"} 0+10x80
tenure_raft_boltdb_store_logs_duration_seconds_bucket{job="t",instance="a",le="0.2"} 0+10x80
tenure_raft_boltdb_store_logs_duration_seconds_bucket{job="t",instance="a",le="+Inf"} 0+10x80`, false},
		{"TenureReplicaHalted", `tenure_replica_halted_index{job="t",instance="a"} 0x40 4711x40`, true},
		{"TenureReplicaHalted", `tenure_replica_halted_index{job="t",instance="a"} 0x80`, false},
		{"TenureShardsUnowned", `tenure_shards_unowned{job="t",instance="a"} 3x80`, true},
		{"TenureShardsUnowned", `tenure_shards_unowned{job="t",instance="a"} 0x80`, false},
		{"TenureLeaseRenewalsFailing", `tenure_lease_renewal_failing{job="t",instance="a"} 1x80`, true},
		{"TenureLeaseRenewalsFailing", `tenure_lease_renewal_failing{job="t",instance="a"} 0x80`, false},
		{"TenureMemberStreamLagging", `tenure_stream_lag_entries{job="t",instance="m"} 5000x80`, true},
		{"TenureMemberStreamLagging", `tenure_stream_lag_entries{job="t",instance="m"} 12x80`, false},
		{"TenureJobQueueFull", `tenure_job_enqueues_refused_total{job="t",instance="a"} 0+3x80`, true},
		{"TenureJobQueueFull", `tenure_job_enqueues_refused_total{job="t",instance="a"} 7x80`, false},
	}
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, promqltest.DefaultMaxSamplesPerQuery)
	seen := map[string]bool{}
	for _, c := range cases {
		expr, ok := exprs[c.alert]
		if !ok {
			t.Errorf("no alert %s", c.alert)
			continue
		}
		seen[c.alert] = true
		storage := promqltest.LoadedStorage(t, "load 15s\n  "+c.load)
		q, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, time.Unix(0, 0).Add(at))
		if err != nil {
			t.Fatalf("%s: %v", c.alert, err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", c.alert, res.Err)
		}
		v, err := res.Vector()
		if err != nil {
			t.Fatalf("%s: %v", c.alert, err)
		}
		if fired := len(v) > 0; fired != c.fires {
			t.Errorf("%s over\n%s\nfired %v (%v), want %v", c.alert, c.load, fired, v, c.fires)
		}
		q.Close()
	}
	for a := range exprs {
		if !seen[a] {
			t.Errorf("alert %s has no case here", a)
		}
	}
}
