package bench

// The control group's own view of a drain's commit phase: the voters' Raft
// histograms read before and after the measured runs, so the commit phase
// of handoffPhases can be set beside what the log writes (fsyncs) and the
// leader's commits cost over the same runs.

import (
	"context"
	"fmt"
)

// maxMetricsBody bounds one /metrics answer the benchmark reads.
const maxMetricsBody = 8 << 20

// raftHistograms are the bridged Raft series raftLatency reads
// (httpapi/gometrics.go): every log write of a voter — one bbolt commit,
// two fdatasyncs — and, on the leader, an entry's dispatch → commit (its
// own write, then a follower's write and one round trip).
var raftHistograms = []string{
	"tenure_raft_boltdb_store_logs_duration_seconds",
	"tenure_raft_commit_duration_seconds",
}

// raftLatency is the "raft" object of the drain summary: p50/p99 of every
// voter's log writes and of the leader's commits during the measured runs
// (all entries, not only the Transfers; interpolated inside ×2 buckets as
// histogram_quantile does).
type raftLatency struct {
	StoreLogs      int     `json:"store_logs"`
	StoreLogsP50Ms float64 `json:"store_logs_p50_ms"`
	StoreLogsP99Ms float64 `json:"store_logs_p99_ms"`
	Commits        int     `json:"commits"`
	CommitP50Ms    float64 `json:"commit_p50_ms"`
	CommitP99Ms    float64 `json:"commit_p99_ms"`
}

// raftSnapshot is every running agent's raftHistograms at one moment:
// agent → series → bucket bound → cumulative count.
type raftSnapshot map[string]map[string]map[float64]float64

func (c *foCluster) raftSnapshot(ctx context.Context) (raftSnapshot, error) {
	snap := raftSnapshot{}
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		snap[a.id] = map[string]map[float64]float64{}
		for _, name := range raftHistograms {
			h, err := c.histogram(ctx, a, name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.id, err)
			}
			snap[a.id][name] = h
		}
	}
	return snap, nil
}

// raftLatencyBetween sums each series' observations between two snapshots
// over the agents in both (an agent restarted in between counts from its
// restart) and summarizes them.
func raftLatencyBetween(before, after raftSnapshot) raftLatency {
	var out raftLatency
	for i, name := range raftHistograms {
		sum := map[float64]float64{}
		for id, series := range after {
			h, b := series[name], before[id][name]
			if b == nil || inf(h) < inf(b) {
				b = nil // restarted: its counts start at 0
			}
			for bound, v := range h {
				sum[bound] += v - b[bound]
			}
		}
		n := int(inf(sum))
		p50, _ := histogramQuantile(0.5, nil, sum)
		p99, _ := histogramQuantile(0.99, nil, sum)
		if i == 0 {
			out.StoreLogs, out.StoreLogsP50Ms, out.StoreLogsP99Ms = n, p50*1000, p99*1000
		} else {
			out.Commits, out.CommitP50Ms, out.CommitP99Ms = n, p50*1000, p99*1000
		}
	}
	return out
}

// inf is a cumulative histogram's +Inf bucket: its observation count.
func inf(h map[float64]float64) float64 {
	var top float64
	for _, v := range h {
		top = max(top, v)
	}
	return top
}
