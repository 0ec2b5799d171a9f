package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
	"github.com/tenurehq/tenure/internal/benchkit"
)

func init() {
	registerBench("idle", "an idle real agent cluster: Raft commits per second and lease renewal latency", runBenchIdle)
}

// idleOptions are the parsed flags of `tenure bench idle`.
type idleOptions struct {
	agentClusterFlags
	window time.Duration
}

func parseIdleFlags(args []string, stderr io.Writer) (idleOptions, error) {
	var o idleOptions
	fs := flag.NewFlagSet("bench idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.agentClusterFlags.register(fs)
	fs.DurationVar(&o.window, "window", 10*time.Second, "how long to measure once the cluster settled")
	if err := cli.ParseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench idle: unexpected arguments %q", fs.Args())
	}
	if _, err := profileConfig(o.profile); err != nil {
		return o, fmt.Errorf("bench idle: %w", err)
	}
	switch {
	case o.nodes < 3 || o.nodes > 64:
		return o, fmt.Errorf("bench idle: -nodes %d: want 3..64 (the control group needs 3)", o.nodes)
	case o.window < time.Second || o.window > 10*time.Minute:
		return o, fmt.Errorf("bench idle: -window %v: want 1s..10m", o.window)
	case o.partitions < o.nodes || o.partitions > 1<<16:
		return o, fmt.Errorf("bench idle: -partitions %d: want %d (nodes)..%d", o.partitions, o.nodes, 1<<16)
	}
	return o, nil
}

// idleSummary is `tenure bench idle --json`.
type idleSummary struct {
	Profile    string  `json:"profile"`
	Nodes      int     `json:"nodes"`
	Partitions int     `json:"partitions"`
	WindowS    float64 `json:"window_s"`
	// RaftCommitsPerSec is the control-group leader's applied-index delta
	// over the window, per second: every Raft entry the idle cluster
	// commits (heartbeats, renewals on the log, planner commands).
	RaftCommitsPerSec float64 `json:"raft_commits_per_sec"`
	// RenewP50Ms / RenewP99Ms: lease renewal latency (ask → outcome, as
	// the renewing node measures it), the median over the agents of their
	// last-10-s quantiles (p99: the largest agent's); -1 if no agent
	// reported renewals (a cluster renewing through log heartbeats).
	RenewP50Ms  float64 `json:"renew_p50_ms"`
	RenewP99Ms  float64 `json:"renew_p99_ms"`
	AgentRSSMB  float64 `json:"agent_rss_mb"`
	AgentCPUPct float64 `json:"agent_cpu_pct"`
}

func runBenchIdle(ctx context.Context, m *Env, args []string) error {
	o, err := parseIdleFlags(args, m.Stderr)
	if err != nil {
		return err
	}
	progress := func(format string, a ...any) { fmt.Fprintf(m.Stderr, format+"\n", a...) }
	fo := failoverOptions{agentClusterFlags: agentClusterFlags{nodes: o.nodes, profile: o.profile, partitions: o.partitions}, tick: 100 * time.Millisecond}
	c, rec, closeAll, err := newWitnessedCluster(fo, o.agentBin, o.dir, "tenure-bench-idle-", progress)
	if err != nil {
		return err
	}
	defer closeAll()
	progress("starting %d agents (profile %s, %d shards) in %s", o.nodes, o.profile, o.partitions, c.dir)
	if err := c.start(ctx); err != nil {
		return err
	}
	if err := c.waitSettled(ctx, rec, 3*time.Minute); err != nil {
		return err
	}
	// Let the last moves and registrations finish before measuring.
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		return err
	}
	leader, i0, err := c.leaderApplied(ctx)
	if err != nil {
		return fmt.Errorf("bench idle: %w", err)
	}
	before := make([]map[float64]float64, len(c.agents))
	for i, a := range c.agents {
		if before[i], err = c.renewHistogram(ctx, a); err != nil {
			return fmt.Errorf("bench idle: %s: %w", a.id, err)
		}
	}
	t0 := time.Now()
	rss, cpu := c.idleUsage(ctx, o.window)
	_, i1, err := c.leaderApplied(ctx)
	if err != nil {
		return fmt.Errorf("bench idle: %w", err)
	}
	el := time.Since(t0)
	s := idleSummary{Profile: o.profile, Nodes: o.nodes, Partitions: o.partitions, WindowS: el.Seconds(),
		RaftCommitsPerSec: float64(i1-i0) / el.Seconds(), AgentRSSMB: rss, AgentCPUPct: cpu, RenewP50Ms: -1, RenewP99Ms: -1}
	var p50s, p99s []float64
	for i, a := range c.agents {
		after, err := c.renewHistogram(ctx, a)
		if err != nil {
			return fmt.Errorf("bench idle: %s: %w", a.id, err)
		}
		if v, ok := histogramQuantile(0.5, before[i], after); ok {
			p50s = append(p50s, v*1000)
		}
		if v, ok := histogramQuantile(0.99, before[i], after); ok {
			p99s = append(p99s, v*1000)
		}
	}
	if len(p50s) > 0 {
		slices.Sort(p50s)
		slices.Sort(p99s)
		s.RenewP50Ms = benchkit.NearestRank(p50s, 0.5)
		s.RenewP99Ms = p99s[len(p99s)-1]
	}
	if o.json {
		return writeJSONLine(m.Stdout, s)
	}
	fmt.Fprintf(m.Stdout, "tenure idle, profile %s, %d agents, %d shards, %.1f s window (leader %s)\n", s.Profile, s.Nodes, s.Partitions, s.WindowS, leader)
	fmt.Fprintf(m.Stdout, "  raft commits: %.2f/s\n", s.RaftCommitsPerSec)
	if s.RenewP50Ms >= 0 {
		fmt.Fprintf(m.Stdout, "  lease renewal latency: p50 %.3f ms, p99 %.3f ms\n", s.RenewP50Ms, s.RenewP99Ms)
	} else {
		fmt.Fprintln(m.Stdout, "  lease renewal latency: no renewals reported (renewing through log heartbeats)")
	}
	fmt.Fprintf(m.Stdout, "  idle agent %.0f MiB RSS, %.1f%% CPU\n", s.AgentRSSMB, s.AgentCPUPct)
	return nil
}

// leaderApplied returns the control-group leader and its applied index.
func (c *foCluster) leaderApplied(ctx context.Context) (string, uint64, error) {
	var st struct {
		ControlLeader string `json:"control_leader"`
		AppliedIndex  uint64 `json:"applied_index"`
	}
	for _, a := range c.agents {
		if err := c.get(ctx, a, "/v1/status", &st); err != nil || st.ControlLeader == "" {
			continue
		}
		l := c.agent(st.ControlLeader)
		if l == nil {
			continue
		}
		if err := c.get(ctx, l, "/v1/status", &st); err != nil {
			return "", 0, err
		}
		return l.id, st.AppliedIndex, nil
	}
	return "", 0, fmt.Errorf("no agent names a control-group leader")
}

// renewHistogram reads an agent's tenure_lease_renew_duration_seconds
// histogram from /metrics: bucket upper bound (s) → cumulative count.
func (c *foCluster) renewHistogram(ctx context.Context, a *foAgent) (map[float64]float64, error) {
	return c.histogram(ctx, a, "tenure_lease_renew_duration_seconds")
}

// histogram reads one unlabelled histogram of an agent's /metrics: bucket
// upper bound (s) → cumulative count.
func (c *foCluster) histogram(ctx context.Context, a *foAgent, name string) (map[float64]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseHistogramBuckets(io.LimitReader(resp.Body, maxMetricsBody), name)
}

// parseHistogramBuckets reads the _bucket lines of one histogram without
// other labels from a Prometheus text exposition: le → cumulative count.
func parseHistogramBuckets(r io.Reader, name string) (map[float64]float64, error) {
	out := map[float64]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := name + `_bucket{le="`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		bound, err1 := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		v, err2 := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out[bound] = v
	}
	return out, sc.Err()
}

// histogramQuantile is the q-quantile of the observations between two
// reads of one cumulative histogram, interpolated linearly inside its
// bucket as Prometheus' histogram_quantile does (an observation in the
// +Inf bucket counts as the largest finite bound); false when none.
func histogramQuantile(q float64, before, after map[float64]float64) (float64, bool) {
	bounds := slices.Sorted(maps.Keys(after))
	if len(bounds) == 0 {
		return 0, false
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for _, b := range bounds {
		count := after[b] - before[b]
		if count >= rank {
			if math.IsInf(b, 1) {
				return lower, true
			}
			if count == prevCount {
				return b, true
			}
			return lower + (b-lower)*(rank-prevCount)/(count-prevCount), true
		}
		lower, prevCount = b, count
	}
	return lower, true
}
