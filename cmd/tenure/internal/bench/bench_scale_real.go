package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/benchkit"
)

// `tenure bench scale --real`: N real agent processes on this machine — a
// few voters with data dirs, the rest disk-less members — measured as an
// operator would see them (docs/benchmarks.md, "Real agents").

// realScaleOptions are the flags of `bench scale --real`.
type realScaleOptions struct {
	nodes, voters, shards int
	profile               string
	idle                  time.Duration
	settle                time.Duration
	agentBin, dir         string
	json                  bool
	// memberNice and memberProcs, when > 0, run the disk-less members
	// under nice -n memberNice and with GOMAXPROCS=memberProcs (the
	// voters as they are): on a small shared machine the voters' Raft
	// timers then win the CPU, as they would with their own cores.
	memberNice, memberProcs int
}

// realScaleResult is `tenure bench scale --real --json`.
type realScaleResult struct {
	Method  string `json:"method"`
	Nodes   int    `json:"nodes"`
	Voters  int    `json:"voters"`
	Members int    `json:"members"`
	Shards  int    `json:"shards"`
	Profile string `json:"profile"`
	CPUs    int    `json:"cpus"`
	// MemberNice and MemberGOMAXPROCS are -member-nice and
	// -member-gomaxprocs (0: not set).
	MemberNice       int `json:"member_nice,omitempty"`
	MemberGOMAXPROCS int `json:"member_gomaxprocs,omitempty"`

	// SpawnMs is how long starting every process took; ConvergeMs the time
	// from the first spawn until every shard was validly owned by a
	// running agent and every agent owned at least one.
	SpawnMs    float64 `json:"spawn_ms"`
	ConvergeMs float64 `json:"converge_ms"`
	// Churn until convergence (or until the run gave up; printed then
	// too): what a starved control group costs.
	Churn realChurn `json:"churn"`
	// QuietMs is the time from the first spawn until, after converging,
	// the leader's applied index stood still for quietFor (the planner's
	// rebalancing moves done): the at-rest figures are taken after it.
	// QuietTimedOut: it did not within -settle-timeout; the figures are
	// then taken anyway.
	QuietMs       float64 `json:"quiet_ms"`
	QuietTimedOut bool    `json:"quiet_timed_out,omitempty"`

	// At rest, over IdleSeconds: per-process RSS (MiB) and CPU (% of one
	// core), median and max over all agents, and the leader's.
	IdleSeconds  float64 `json:"idle_seconds"`
	RSSMedianMB  float64 `json:"rss_median_mb"`
	RSSMaxMB     float64 `json:"rss_max_mb"`
	CPUMedianPct float64 `json:"cpu_median_pct"`
	CPUMaxPct    float64 `json:"cpu_max_pct"`
	LeaderCPUPct float64 `json:"leader_cpu_pct"`
	LeaderRSSMB  float64 `json:"leader_rss_mb"`
	TotalCPUPct  float64 `json:"total_cpu_pct"`
	// The disk-less members' RSS at rest split (median, MiB): anonymous
	// memory (heap, stacks: the process's own) and file-backed pages
	// (mostly the tenure binary's text and read-only data, shared by
	// every process running it: VmRSS counts them in each).
	MemberRSSMedianMB     float64 `json:"member_rss_median_mb"`
	MemberRSSAnonMedianMB float64 `json:"member_rss_anon_median_mb"`
	MemberRSSFileMedianMB float64 `json:"member_rss_file_median_mb"`
	// StreamBytesPerMemberPerS is the committed-state stream's entry and
	// snapshot bytes received per member per second at rest
	// (tenure_stream_received_bytes_total).
	StreamBytesPerMemberPerS float64 `json:"stream_bytes_per_member_per_s"`
	// VoterCPUMaxPct is the busiest voter's CPU at rest that is not the
	// leader (% of one core).
	VoterCPUMaxPct  float64 `json:"voter_cpu_max_pct"`
	CommitsPerSec   float64 `json:"raft_commits_per_s"`
	GossipPktPerSec float64 `json:"gossip_packets_per_node_per_s"`
	GossipBytesPerS float64 `json:"gossip_bytes_per_node_per_s"`

	// Failover of one killed member (SIGKILL): until every shard it owned
	// is validly owned by another agent in the ledger; then the member
	// starts again (disk-less: a new incarnation, its replica rebuilt)
	// until it owns shards again.
	FailoverMember   string  `json:"failover_member"`
	FailoverShards   int     `json:"failover_shards"`
	FailoverMs       float64 `json:"failover_ms"`
	RejoinMs         float64 `json:"rejoin_ms"`
	RejoinStartedMs  float64 `json:"rejoin_started_ms"`
	RejoinIncarnFrom uint64  `json:"rejoin_incarnation_from"`
	RejoinIncarnTo   uint64  `json:"rejoin_incarnation_to"`

	// Then SIGTERM to every agent at once (a fleet shutdown): how long
	// until the last one exited, and those that did not exit 0 by
	// themselves within stopGrace.
	StopAllMs      float64  `json:"stop_all_ms"`
	StopAllUnclean []string `json:"stop_all_unclean"`
}

func parseRealScaleFlags(fs *flag.FlagSet, o *realScaleOptions) {
	fs.IntVar(&o.voters, "voters", 3, "--real: control-group voters (with data dirs); the other agents are disk-less members")
	fs.DurationVar(&o.settle, "settle-timeout", 10*time.Minute, "--real: how long the cluster may take to converge")
	fs.StringVar(&o.agentBin, "agent-bin", "", "--real: tenure binary to run agents with (default: this executable)")
	fs.IntVar(&o.memberNice, "member-nice", 0, "--real: run the disk-less members under `nice -n` this (1..19; 0: as the voters), so the voters win the CPU on a busy machine")
	fs.IntVar(&o.memberProcs, "member-gomaxprocs", 0, "--real: run the disk-less members with GOMAXPROCS set to this (0: unset)")
	fs.StringVar(&o.dir, "dir", "", "--real: directory for the voters' data dirs and every agent's log (default: a temporary one, removed after)")
}

func (o realScaleOptions) validate() error {
	switch {
	case o.nodes < 2 || o.nodes > 500:
		return fmt.Errorf("bench scale --real: -nodes %d: want 2..500 (every node is a process)", o.nodes)
	case o.voters != 1 && o.voters != 3 && o.voters != 5:
		return fmt.Errorf("bench scale --real: -voters %d: want 1, 3 or 5", o.voters)
	case o.voters >= o.nodes:
		return fmt.Errorf("bench scale --real: -voters %d with -nodes %d: want at least one disk-less member", o.voters, o.nodes)
	case o.shards < o.nodes || o.shards > 1<<16:
		return fmt.Errorf("bench scale --real: -shards %d: want %d (nodes)..65536", o.shards, o.nodes)
	case o.memberNice < 0 || o.memberNice > 19 || o.memberProcs < 0 || o.memberProcs > 256:
		return fmt.Errorf("bench scale --real: -member-nice %d, -member-gomaxprocs %d: want 0..19 and 0..256", o.memberNice, o.memberProcs)
	case o.idle <= 0 || o.settle <= 0:
		return fmt.Errorf("bench scale --real: -idle %v and -settle-timeout %v must be positive", o.idle, o.settle)
	}
	return nil
}

// realChurn is what happened until convergence: the control group's
// leader changes, the leases lost and the CPU it all took.
type realChurn struct {
	// Terms is the highest Raft term the voters report
	// (tenure_control_term): 1 + the elections that changed the term.
	Terms float64 `json:"terms"`
	// FailoverMoves are the new owners a voter saw granted to shards that
	// had lost their valid owner (tenure_shard_moves_total, cause
	// failover): re-grants after an expiry or a restart. PlannedMoves
	// are those after a revoke (rebalancing, the first placement).
	FailoverMoves float64 `json:"failover_moves"`
	PlannedMoves  float64 `json:"planned_moves"`
	// RenewalFailures is how often members' renewals started failing
	// (tenure_lease_renewal_failures_total, summed over members).
	RenewalFailures float64 `json:"renewal_failures"`
	// CPU seconds the processes used from their start (user + system).
	MembersCPUSec float64 `json:"members_cpu_s"`
	VotersCPUSec  float64 `json:"voters_cpu_s"`
}

// churn reads realChurn from the running agents.
func (c *realCluster) churn(ctx context.Context) realChurn {
	var ch realChurn
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		cpu := pidCPU(a.cmd.Process.Pid).Seconds()
		if c.voter(a) {
			ch.VotersCPUSec += cpu
			m := c.metric(ctx, a, "tenure_control_term")
			ch.Terms = max(ch.Terms, m["tenure_control_term"])
			continue
		}
		ch.MembersCPUSec += cpu
		ch.RenewalFailures += c.metric(ctx, a, "tenure_lease_renewal_failures_total")["tenure_lease_renewal_failures_total"]
	}
	if v := c.firstVoter(); v != nil {
		m := c.metric(ctx, v, `tenure_shard_moves_total{cause="failover"}`, `tenure_shard_moves_total{cause="planned"}`)
		ch.FailoverMoves, ch.PlannedMoves = m[`tenure_shard_moves_total{cause="failover"}`], m[`tenure_shard_moves_total{cause="planned"}`]
	}
	return ch
}

func (ch realChurn) String() string {
	return fmt.Sprintf("churn: term %.0f, %.0f failover moves, %.0f planned moves, %.0f members' renewal failures; CPU members %.1f s, voters %.1f s",
		ch.Terms, ch.FailoverMoves, ch.PlannedMoves, ch.RenewalFailures, ch.MembersCPUSec, ch.VotersCPUSec)
}

// realCluster is the benchmark's agents.
type realCluster struct {
	bin, dir string
	o        realScaleOptions
	agents   []*foAgent
	client   http.Client
	log      func(string, ...any)
}

func (c *realCluster) voter(a *foAgent) bool { return slices.Index(c.agents, a) < c.o.voters }

func (c *realCluster) args(a *foAgent) []string {
	var seeds []string
	for _, v := range c.agents[:c.o.voters] {
		seeds = append(seeds, v.gossip)
	}
	args := []string{"agent",
		"--node-id", a.id,
		"--seeds", strings.Join(seeds, ","),
		"--bootstrap-expect", strconv.Itoa(c.o.voters),
		"--gossip-addr", a.gossip,
		"--raft-addr", a.raft,
		"--http-addr", a.httpAddr,
		"--profile", c.o.profile,
		"--partitions", strconv.Itoa(c.o.shards),
		"--workload=false",
		"--drain-timeout", "2s",
		"--log-format", "json",
		"--log-level", "warn",
	}
	if c.voter(a) {
		return append(args, "--voter", "always", "--data-dir", filepath.Join(c.dir, a.id))
	}
	return append(args, "--voter", "never", "--diskless")
}

func (c *realCluster) spawn(a *foAgent) error {
	var p agentProc
	if !c.voter(a) {
		p.nice = c.o.memberNice
		if c.o.memberProcs > 0 {
			p.env = []string{"GOMAXPROCS=" + strconv.Itoa(c.o.memberProcs)}
		}
	}
	return spawnAgentWith(c.bin, c.dir, a, c.args(a), p)
}

// stopAll sends SIGTERM to every agent at once, then SIGKILL to those
// still running after stopGrace.
func (c *realCluster) stopAll() { stopAgents(c.agents, stopGrace) }

// stopGrace is how long the benchmark waits for its agents to exit after
// SIGTERM before it kills them.
const stopGrace = 15 * time.Second

// layout gives the cluster its o.nodes agents, voters first, each with
// three free loopback ports (gossip, raft, HTTP); none is started.
func (c *realCluster) layout() error {
	addrs, err := benchkit.FreeLoopbackAddrs(3 * c.o.nodes)
	if err != nil {
		return err
	}
	c.agents = nil
	for i := range c.o.nodes {
		id := fmt.Sprintf("member-%03d", i)
		if i < c.o.voters {
			id = fmt.Sprintf("voter-%d", i)
		}
		c.agents = append(c.agents, &foAgent{id: id, gossip: addrs[3*i], raft: addrs[3*i+1], httpAddr: addrs[3*i+2]})
	}
	return nil
}

// spawnAll starts every agent of the layout.
func (c *realCluster) spawnAll() error {
	for _, a := range c.agents {
		if err := c.spawn(a); err != nil {
			return err
		}
	}
	return nil
}

func (c *realCluster) get(ctx context.Context, a *foAgent, path string, out any) error {
	return agentGet(ctx, &c.client, a, path, out)
}

// realStatus is the part of GET /v1/status the benchmark reads.
type realStatus struct {
	Incarnation   uint64 `json:"incarnation"`
	ControlLeader string `json:"control_leader"`
	AppliedIndex  uint64 `json:"applied_index"`
}

// firstVoter returns the first running voter.
func (c *realCluster) firstVoter() *foAgent {
	for _, a := range c.agents[:c.o.voters] {
		if a.running() {
			return a
		}
	}
	return nil
}

// table reads the shard table from a running voter.
func (c *realCluster) table(ctx context.Context) ([]foShard, error) {
	v := c.firstVoter()
	if v == nil {
		return nil, errors.New("no voter running")
	}
	var sh []foShard
	return sh, c.get(ctx, v, "/v1/shards", &sh)
}

// converged reports whether every running agent has started (its API
// answers /v1/status: it registered with the control group and its
// replica caught up), every shard is validly owned by a running agent and
// every running agent owns one; why says what is missing.
func (c *realCluster) converged(ctx context.Context) (ok bool, why string) {
	starting := 0
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		if err := c.get(ctx, a, "/v1/status", nil); err != nil {
			starting++
			why = a.id + ": " + err.Error()
		}
	}
	if starting > 0 {
		return false, fmt.Sprintf("%d agents still starting (%s)", starting, why)
	}
	sh, err := c.table(ctx)
	if err != nil {
		return false, err.Error()
	}
	if len(sh) != c.o.shards {
		return false, fmt.Sprintf("%d shards in the table, want %d", len(sh), c.o.shards)
	}
	owned := map[string]int{}
	running := map[string]bool{}
	for _, a := range c.agents {
		running[a.id] = a.running()
	}
	for _, s := range sh {
		if s.State != "owned" || !s.Valid || !running[s.Owner] {
			return false, fmt.Sprintf("shard %d is %s (valid %v) by %q", s.Shard, s.State, s.Valid, s.Owner)
		}
		owned[s.Owner]++
	}
	for _, a := range c.agents {
		if a.running() && owned[a.id] == 0 {
			return false, a.id + " owns no shard yet"
		}
	}
	return true, ""
}

// waitConverged polls converged until it holds or limit passes.
func (c *realCluster) waitConverged(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ok, why := c.converged(ctx)
		if ok {
			return nil
		}
		for _, a := range c.agents {
			if a.cmd != nil && !a.running() {
				return fmt.Errorf("agent %s exited (log: %s)", a.id, filepath.Join(c.dir, a.id+".log"))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not converged within %v: %s (agent logs in %s)", limit, why, c.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// metric sums the samples of a Prometheus text metric (no labels) read
// from an agent's /metrics; 0 if absent.
func (c *realCluster) metric(ctx context.Context, a *foAgent, names ...string) map[string]float64 {
	var sb strings.Builder
	out := map[string]float64{}
	if err := c.get(ctx, a, "/metrics", &sb); err != nil {
		return out
	}
	sc := bufio.NewScanner(strings.NewReader(sb.String()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !slices.Contains(names, f[0]) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] += v
		}
	}
	return out
}

// udpOutDatagrams reads the host network namespace's UDP OutDatagrams
// (/proc/net/snmp); ok false where unknown.
func udpOutDatagrams() (n float64, ok bool) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, false
	}
	var header []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "Udp:" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		if i := slices.Index(header, "OutDatagrams"); i > 0 && i < len(f) {
			v, err := strconv.ParseFloat(f[i], 64)
			return v, err == nil
		}
	}
	return 0, false
}

func runBenchScaleReal(ctx context.Context, m *Env, o realScaleOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	bin, dir, cleanup, err := agentWorkspace(o.agentBin, o.dir, "tenure-bench-scale-")
	if err != nil {
		return err
	}
	defer cleanup()
	progress := func(format string, a ...any) { fmt.Fprintf(m.Stderr, format+"\n", a...) }
	c := &realCluster{bin: bin, dir: dir, o: o, client: http.Client{Timeout: 10 * time.Second}, log: progress}
	defer c.stopAll()

	if err := c.layout(); err != nil {
		return err
	}
	res := realScaleResult{
		Method: "real agent processes on loopback: voters with data dirs (--voter=always), the rest disk-less members (--diskless --voter=never), workload off",
		Nodes:  o.nodes, Voters: o.voters, Members: o.nodes - o.voters, Shards: o.shards, Profile: o.profile, CPUs: runtime.NumCPU(),
		MemberNice: o.memberNice, MemberGOMAXPROCS: o.memberProcs,
	}
	progress("starting %d agents (%d voters with data dirs, %d disk-less members), %d shards, profile %s, in %s",
		o.nodes, o.voters, o.nodes-o.voters, o.shards, o.profile, dir)
	t0 := time.Now()
	if err := c.spawnAll(); err != nil {
		return err
	}
	res.SpawnMs = ms(time.Since(t0))
	if err := c.waitConverged(ctx, o.settle); err != nil {
		progress("%v", c.churn(ctx))
		return fmt.Errorf("bench scale --real: %w", err)
	}
	res.ConvergeMs = ms(time.Since(t0))
	res.Churn = c.churn(ctx)
	progress("%v", res.Churn)
	progress("converged in %.1f s (spawning took %.1f s)", res.ConvergeMs/1000, res.SpawnMs/1000)
	quiet, err := c.waitQuiet(ctx, t0.Add(o.settle))
	if err != nil {
		return fmt.Errorf("bench scale --real: %w", err)
	}
	res.QuietMs, res.QuietTimedOut = ms(time.Since(t0)), !quiet
	progress("quiet (no commit for %v) after %.1f s (timed out: %v)", quietFor, res.QuietMs/1000, !quiet)

	if err := c.idle(ctx, &res); err != nil {
		return fmt.Errorf("bench scale --real: %w", err)
	}
	progress("at rest over %.0f s: RSS median %.0f MiB (max %.0f), CPU median %.1f%% (max %.1f%%, leader %.1f%%), %.0f commits/s, %.1f gossip packets/s per node",
		res.IdleSeconds, res.RSSMedianMB, res.RSSMaxMB, res.CPUMedianPct, res.CPUMaxPct, res.LeaderCPUPct, res.CommitsPerSec, res.GossipPktPerSec)
	if err := c.failover(ctx, &res); err != nil {
		return fmt.Errorf("bench scale --real: failover: %w", err)
	}
	progress("member %s killed: its %d shards owned again after %.0f ms; restarted disk-less (incarnation %d → %d), owning shards after %.0f ms",
		res.FailoverMember, res.FailoverShards, res.FailoverMs, res.RejoinIncarnFrom, res.RejoinIncarnTo, res.RejoinMs)

	took, unclean := stopAgents(c.agents, stopGrace)
	res.StopAllMs, res.StopAllUnclean = ms(took), unclean
	if res.StopAllUnclean == nil {
		res.StopAllUnclean = []string{}
	}
	progress("SIGTERM to all %d agents: the last exited after %.0f ms; %d did not exit 0 by themselves %v",
		len(c.agents), res.StopAllMs, len(unclean), unclean)

	if o.json {
		return writeJSONLine(m.Stdout, res)
	}
	w := m.Stdout
	fmt.Fprintf(w, "%d real agents (%d voters with data dirs, %d disk-less members), %d shards, profile %s, %d CPUs\n",
		res.Nodes, res.Voters, res.Members, res.Shards, res.Profile, res.CPUs)
	if res.MemberNice > 0 || res.MemberGOMAXPROCS > 0 {
		fmt.Fprintf(w, "  members run with nice %d, GOMAXPROCS %d (0: unset)\n", res.MemberNice, res.MemberGOMAXPROCS)
	}
	fmt.Fprintf(w, "  full ownership after     %8.1f s (spawning %d processes took %.1f s)\n", res.ConvergeMs/1000, res.Nodes, res.SpawnMs/1000)
	quietNote := ""
	if res.QuietTimedOut {
		quietNote = ", not quiet by -settle-timeout"
	}
	fmt.Fprintf(w, "  until converged          %s\n", res.Churn)
	fmt.Fprintf(w, "  at rest (no commit %v) %8.1f s%s\n", quietFor, res.QuietMs/1000, quietNote)
	fmt.Fprintf(w, "  RSS per agent at rest    %8.0f MiB median, %.0f max (leader %.0f)\n", res.RSSMedianMB, res.RSSMaxMB, res.LeaderRSSMB)
	fmt.Fprintf(w, "  member RSS at rest       %8.0f MiB median: %.0f anonymous, %.0f file-backed (the binary, shared)\n",
		res.MemberRSSMedianMB, res.MemberRSSAnonMedianMB, res.MemberRSSFileMedianMB)
	fmt.Fprintf(w, "  other voters' CPU        %8.1f %% at rest (the busiest)\n", res.VoterCPUMaxPct)
	fmt.Fprintf(w, "  stream per member        %8.0f bytes/s at rest\n", res.StreamBytesPerMemberPerS)
	fmt.Fprintf(w, "  CPU per agent at rest    %8.1f %% median, %.1f %% max (leader %.1f %%; all agents %.0f %% of one core)\n",
		res.CPUMedianPct, res.CPUMaxPct, res.LeaderCPUPct, res.TotalCPUPct)
	fmt.Fprintf(w, "  Raft commits             %8.0f /s\n", res.CommitsPerSec)
	fmt.Fprintf(w, "  gossip per agent         %8.1f packets/s, %.0f bytes/s\n", res.GossipPktPerSec, res.GossipBytesPerS)
	fmt.Fprintf(w, "  member failover          %8.0f ms (%s killed, %d shards owned again)\n", res.FailoverMs, res.FailoverMember, res.FailoverShards)
	fmt.Fprintf(w, "  member rejoin            %8.0f ms to own shards again, %.0f ms to start (disk-less restart, incarnation %d → %d)\n",
		res.RejoinMs, res.RejoinStartedMs, res.RejoinIncarnFrom, res.RejoinIncarnTo)
	fmt.Fprintf(w, "  SIGTERM to every agent   %8.0f ms until the last exited; not exiting 0 by themselves: %d %v\n",
		res.StopAllMs, len(res.StopAllUnclean), res.StopAllUnclean)
	return nil
}

// quietFor is how long the leader's applied index must stand still before
// the cluster counts as at rest.
const quietFor = 5 * time.Second

// waitQuiet waits, until deadline, for the first voter's applied index to
// stand still for quietFor; false if it did not by then. A failed read
// counts as a move.
func (c *realCluster) waitQuiet(ctx context.Context, deadline time.Time) (bool, error) {
	var last uint64
	since := time.Now()
	for {
		v := c.firstVoter()
		if v == nil {
			return false, errors.New("no voter running")
		}
		var st realStatus
		err := c.get(ctx, v, "/v1/status", &st)
		now := time.Now()
		if err != nil || st.AppliedIndex != last {
			last, since = st.AppliedIndex, now
		}
		if now.Sub(since) >= quietFor {
			return true, nil
		}
		if now.After(deadline) {
			return false, nil
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return false, err
		}
	}
}

// idle measures the converged cluster at rest.
func (c *realCluster) idle(ctx context.Context, res *realScaleResult) error {
	v := c.firstVoter()
	var st0, st1 realStatus
	if err := c.get(ctx, v, "/v1/status", &st0); err != nil {
		return err
	}
	sent := func() float64 {
		total := 0.0
		for _, a := range c.agents {
			total += c.metric(ctx, a, "tenure_memberlist_udp_sent_bytes_total")["tenure_memberlist_udp_sent_bytes_total"]
		}
		return total
	}
	streamBytes := func() float64 {
		total := 0.0
		for _, a := range c.agents[c.o.voters:] {
			if a.running() {
				total += c.metric(ctx, a, "tenure_stream_received_bytes_total")["tenure_stream_received_bytes_total"]
			}
		}
		return total
	}
	bytes0, stream0 := sent(), streamBytes()
	pk0, pkOK := udpOutDatagrams()
	cpu0 := make([]time.Duration, len(c.agents))
	for i, a := range c.agents {
		cpu0[i] = pidCPU(a.cmd.Process.Pid)
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.o.idle):
	}
	wall := time.Since(t0)
	pk1, _ := udpOutDatagrams()
	var rss, cpu []float64
	for i, a := range c.agents {
		r := pidRSSMB(a.cmd.Process.Pid)
		p := 100 * (pidCPU(a.cmd.Process.Pid) - cpu0[i]).Seconds() / wall.Seconds()
		rss, cpu = append(rss, r), append(cpu, p)
		res.TotalCPUPct += p
		if a.id == st0.ControlLeader {
			res.LeaderCPUPct, res.LeaderRSSMB = p, r
		} else if c.voter(a) {
			res.VoterCPUMaxPct = max(res.VoterCPUMaxPct, p)
		}
	}
	bytes1, stream1 := sent(), streamBytes()
	var mrss, manon, mfile []float64
	for _, a := range c.agents[c.o.voters:] {
		pid := a.cmd.Process.Pid
		mrss, manon, mfile = append(mrss, pidRSSMB(pid)), append(manon, pidStatusMB(pid, "RssAnon:")), append(mfile, pidStatusMB(pid, "RssFile:"))
	}
	for _, v := range [][]float64{mrss, manon, mfile} {
		slices.Sort(v)
	}
	res.MemberRSSMedianMB, res.MemberRSSAnonMedianMB, res.MemberRSSFileMedianMB = benchkit.NearestRank(mrss, 0.5), benchkit.NearestRank(manon, 0.5), benchkit.NearestRank(mfile, 0.5)
	if err := c.get(ctx, v, "/v1/status", &st1); err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	res.IdleSeconds = wall.Seconds()
	res.CommitsPerSec = float64(st1.AppliedIndex-st0.AppliedIndex) / secs
	res.GossipBytesPerS = (bytes1 - bytes0) / secs / float64(len(c.agents))
	res.StreamBytesPerMemberPerS = (stream1 - stream0) / secs / float64(len(c.agents)-c.o.voters)
	if pkOK {
		res.GossipPktPerSec = (pk1 - pk0) / wall.Seconds() / float64(len(c.agents))
	}
	slices.Sort(rss)
	slices.Sort(cpu)
	res.RSSMedianMB, res.RSSMaxMB = benchkit.NearestRank(rss, 0.5), rss[len(rss)-1]
	res.CPUMedianPct, res.CPUMaxPct = benchkit.NearestRank(cpu, 0.5), cpu[len(cpu)-1]
	return nil
}

// failover kills the disk-less member that owns the most shards, times
// until its shards are validly owned by running agents, then restarts it
// and times until it owns shards again.
func (c *realCluster) failover(ctx context.Context, res *realScaleResult) error {
	sh, err := c.table(ctx)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, s := range sh {
		count[s.Owner]++
	}
	// The member owning the most shards whose API answers.
	members := slices.Clone(c.agents[c.o.voters:])
	slices.SortStableFunc(members, func(a, b *foAgent) int { return count[b.id] - count[a.id] })
	var victim *foAgent
	var before realStatus
	var lastErr error
	for _, a := range members {
		if lastErr = c.get(ctx, a, "/v1/status", &before); lastErr == nil {
			victim = a
			break
		}
		c.log("failover: skipping %s: %v", a.id, lastErr)
	}
	if victim == nil {
		return fmt.Errorf("no member answers /v1/status: %w", lastErr)
	}
	res.FailoverMember, res.FailoverShards, res.RejoinIncarnFrom = victim.id, count[victim.id], before.Incarnation
	mine := map[uint32]bool{}
	for _, s := range sh {
		if s.Owner == victim.id {
			mine[s.Shard] = true
		}
	}
	t0 := time.Now()
	victim.kill()
	limit := time.Now().Add(2 * time.Minute)
	for {
		sh, err := c.table(ctx)
		done := err == nil
		for _, s := range sh {
			if mine[s.Shard] && (s.Owner == victim.id || s.State != "owned" || !s.Valid) {
				done = false
				break
			}
		}
		if done {
			res.FailoverMs = ms(time.Since(t0))
			break
		}
		if time.Now().After(limit) {
			return fmt.Errorf("%s's shards not owned again within 2m", victim.id)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	t1 := time.Now()
	if err := c.spawn(victim); err != nil {
		return err
	}
	for {
		sh, err := c.table(ctx)
		n := 0
		for _, s := range sh {
			if err == nil && s.Owner == victim.id && s.State == "owned" && s.Valid {
				n++
			}
		}
		if n > 0 {
			res.RejoinMs = ms(time.Since(t1))
			break
		}
		if !victim.running() {
			return fmt.Errorf("restarted %s exited (log: %s)", victim.id, filepath.Join(c.dir, victim.id+".log"))
		}
		if time.Since(t1) > 2*time.Minute {
			return fmt.Errorf("restarted %s owns no shard after 2m", victim.id)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	// Its API answers once it registered and its replica caught up.
	var after realStatus
	for {
		err := c.get(ctx, victim, "/v1/status", &after)
		if err == nil {
			break
		}
		if time.Since(t1) > 3*time.Minute {
			return fmt.Errorf("restarted %s has not started after 3m: %w", victim.id, err)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	res.RejoinStartedMs = ms(time.Since(t1))
	res.RejoinIncarnTo = after.Incarnation
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
