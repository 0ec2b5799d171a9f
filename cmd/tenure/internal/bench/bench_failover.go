package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
	"github.com/tenurehq/tenure/internal/benchkit"
)

func init() {
	registerBench("failover", "kill -9 / restart / drain the acting owner of a shard in a real agent cluster; time until the successor acts", runBenchFailover)
}

// failoverOptions are the parsed flags of `tenure bench failover`.
type failoverOptions struct {
	agentClusterFlags
	runs       int
	mode       string
	tick       time.Duration
	tickSample time.Duration // agents' --tick-sample (0: every tick is a sample)
	seed       uint64
	lease      time.Duration
	down       time.Duration
	// fenced puts every partition under fenced takeover (bench_failover_fenced.go).
	fenced      bool
	fencedAfter time.Duration
	// burn is how many CPU-burning processes run beside the cluster
	// during the measured runs (bench_failover_phases.go).
	burn int
	// tls gives the agents a CA and node certificates (mutual TLS on the
	// Raft/RPC port, as a deployment runs): cluster version 6 relays the
	// old owner's word only over it (bench_failover_tls.go).
	tls bool
	// agentLogLevel is the agents' --log-level (debug: the trace lines of
	// a handoff on a word, in <dir>/<id>.log).
	agentLogLevel string
}

func parseFailoverFlags(args []string, stderr io.Writer) (failoverOptions, error) {
	var o failoverOptions
	fs := flag.NewFlagSet("bench failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.agentClusterFlags.register(fs)
	fs.IntVar(&o.runs, "runs", 20, "failovers (or drains) to measure")
	fs.StringVar(&o.mode, "mode", "crash", "crash (kill -9 the owner), restart (kill -9 and restart it at once with the same identity) or drain (planned handoff)")
	fs.DurationVar(&o.tick, "tick", 10*time.Millisecond, "demo workload tick period: the resolution of 'acting' (see -tick-sample)")
	fs.DurationVar(&o.tickSample, "tick-sample", -1, "demo workload sample period below -tick: acting's start and stop are seen to within it (default: 1ms in drain mode, where the gap is milliseconds; else -tick)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for shard choice and kill phase (0: random)")
	fs.DurationVar(&o.down, "down", 0, "restart mode: how long the killed agent stays down before it restarts (0: at once); then restart→acting is measured")
	fs.IntVar(&o.burn, "burn", 0, "run this many CPU-burning processes (busy loops) beside the cluster during the measured runs, to measure under load")
	fs.BoolVar(&o.tls, "tls", true, "run the agents with a CA and node certificates (mutual TLS on the Raft/RPC port, as a deployment does; the handoff on the old owner's word needs it); false: plaintext, as before")
	fs.StringVar(&o.agentLogLevel, "agent-log-level", "warn", "the agents' --log-level; debug writes the trace of each handoff on a word (transfer proposed, forwarded, answered, received, start) to <dir>/<node>.log (keep them with --dir)")
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
	case o.agentLogLevel != "debug" && o.agentLogLevel != "info" && o.agentLogLevel != "warn" && o.agentLogLevel != "error":
		return o, fmt.Errorf("bench failover: -agent-log-level %q: want debug, info, warn or error", o.agentLogLevel)
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

// failoverSummary is `tenure bench failover --json`. Its head is
// bench/peers's (etcd) so the two can be divided.
type failoverSummary struct {
	benchkit.FailoverSummary
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
	// TLS: the agents ran with node certificates (-tls).
	TLS bool `json:"tls"`
	// Starts (drain mode): tenure_shard_starts_total over the measured
	// runs, summed over the agents, by what a start rested on (commit, or
	// word: the old owner's word, cluster version 6).
	Starts map[string]int `json:"starts,omitempty"`
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
	s := failoverSummary{FailoverSummary: benchkit.FailoverSummary{Mode: o.mode, Profile: o.profile, Runs: o.runs}, Nodes: o.nodes, Partitions: o.partitions,
		LeaseMs: o.lease.Milliseconds(), TickMs: float64(o.tick.Microseconds()) / 1000, TickSampleMs: float64(o.tickSample.Microseconds()) / 1000, AgentRSSMB: rss, AgentCPUPct: cpu, Seed: o.seed,
		Fenced: o.fenced, FencedAfterMs: ms(o.fencedAfter), TLS: o.tls}
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
	var startsBefore map[string]map[string]int
	if o.mode == "drain" {
		if raftBefore, err = c.raftSnapshot(ctx); err != nil {
			return fmt.Errorf("bench failover: %w", err)
		}
		if startsBefore, err = c.startsSnapshot(ctx); err != nil {
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
		s.P50Ms, s.P99Ms = benchkit.NearestRank(sorted, 0.5), benchkit.NearestRank(sorted, 0.99)
	}
	slices.Sort(commits)
	s.CommitP50Ms, s.CommitP99Ms = benchkit.NearestRank(commits, 0.5), benchkit.NearestRank(commits, 0.99)
	slices.Sort(restarts)
	s.RestartP50Ms = benchkit.NearestRank(restarts, 0.5)
	slices.Sort(leaderMs)
	slices.Sort(otherMs)
	s.LeaderKills, s.LeaderP50Ms, s.NonLeaderP50Ms = len(leaderMs), benchkit.NearestRank(leaderMs, 0.5), benchkit.NearestRank(otherMs, 0.5)
	slices.Sort(drainCalls)
	s.DrainCallP50Ms = benchkit.NearestRank(drainCalls, 0.5)
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
	if startsBefore != nil {
		after, err := c.startsSnapshot(ctx)
		if err != nil {
			return fmt.Errorf("bench failover: %w", err)
		}
		s.Starts = startsBetween(startsBefore, after)
	}
	s.FsyncP50Ms, s.FsyncP99Ms, _ = probe.finish()
	if o.json {
		return writeJSONLine(m.Stdout, s)
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
	if s.Starts != nil {
		fmt.Fprintf(m.Stdout, "  shard starts over the runs: on commit %d, on the old owner's word %d\n", s.Starts["commit"], s.Starts["word"])
	}
	fmt.Fprintf(m.Stdout, "  tls %v; load average %.1f..%.1f (%d burners); fsync p50 %.2f, p99 %.2f ms\n", s.TLS, s.LoadAvgMin, s.LoadAvgMax, s.Burn, s.FsyncP50Ms, s.FsyncP99Ms)
	if o.fenced {
		fmt.Fprintf(m.Stdout, "  fenced: %d runs left out, their shard moved before the kill (a live owner taken for dead; the witness counts the overlaps)\n", s.FencedEarly)
	}
	fmt.Fprintf(m.Stdout, "  witness: %d ticks, %d violations; idle agent %.0f MiB RSS, %.1f%% CPU\n", s.WitnessTicks, s.WitnessViolations, s.AgentRSSMB, s.AgentCPUPct)
	return nil
}
