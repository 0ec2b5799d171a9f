package bench

import (
	"math"
	"testing"
)

// TestRaftLatencyBetween sums the agents' observations between two
// snapshots, counting a restarted agent (its counts fell) from zero.
func TestRaftLatencyBetween(t *testing.T) {
	h := func(c1, c2, inf float64) map[float64]float64 {
		return map[float64]float64{0.001: c1, 0.002: c2, math.Inf(1): inf}
	}
	snap := func(a, b map[float64]float64) raftSnapshot {
		return raftSnapshot{
			"v1": {raftHistograms[0]: a, raftHistograms[1]: h(0, 0, 0)},
			"v2": {raftHistograms[0]: b, raftHistograms[1]: h(0, 0, 0)},
		}
	}
	// v1: 100 → 150 writes, all 50 new ones in (1, 2] ms. v2 restarted:
	// 500 before, 50 after, all in (0, 1] ms.
	before := snap(h(100, 100, 100), h(500, 500, 500))
	after := snap(h(100, 150, 150), h(50, 50, 50))
	r := raftLatencyBetween(before, after)
	if r.StoreLogs != 100 {
		t.Fatalf("store_logs = %d, want 100 (50 + 50 since v2's restart)", r.StoreLogs)
	}
	if math.Abs(r.StoreLogsP50Ms-1) > 1e-9 || r.StoreLogsP99Ms <= 1 || r.StoreLogsP99Ms > 2 {
		t.Errorf("store_logs p50 %.3f ms (want 1), p99 %.3f ms (want in (1, 2])", r.StoreLogsP50Ms, r.StoreLogsP99Ms)
	}
	if r.Commits != 0 || r.CommitP50Ms != 0 {
		t.Errorf("commits %d, p50 %.3f: want none", r.Commits, r.CommitP50Ms)
	}
}
