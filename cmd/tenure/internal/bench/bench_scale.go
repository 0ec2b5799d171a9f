package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ownership"
)

func init() {
	registerBench("scale", "many nodes in one process (ownership convergence, moves per join/leave, gossip cost), or with --real N agent processes (3 voters, disk-less members)", runBenchScale)
}

// scaleResult is `tenure bench scale --json`.
type scaleResult struct {
	Nodes   int    `json:"nodes"`
	Shards  int    `json:"shards"`
	Profile string `json:"profile"`
	// Method says what ran: the ownership part drives the real Planner and
	// ledger FSM in virtual time with emulated nodes (no Raft, no network);
	// the gossip part runs real memberlist instances over the in-memory
	// transport in real time.
	Method string `json:"method"`

	// Ownership (virtual time, planner + FSM).
	ConvergeVirtualMs float64 `json:"converge_virtual_ms"`
	ConvergeRounds    int     `json:"converge_rounds"`
	ConvergeCPUMs     float64 `json:"converge_cpu_ms"`
	PlanRoundP50Ms    float64 `json:"plan_round_p50_ms"`
	PlanRoundMaxMs    float64 `json:"plan_round_max_ms"`
	MaxLoad           int     `json:"max_load"`
	MinLoad           int     `json:"min_load"`
	AvgLoad           float64 `json:"avg_load"`
	JoinMoved         int     `json:"join_moved"`
	JoinOptimal       int     `json:"join_optimal"`
	JoinVirtualMs     float64 `json:"join_virtual_ms"`
	LeaveMoved        int     `json:"leave_moved"`
	LeaveOptimal      int     `json:"leave_optimal"`
	LeaveVirtualMs    float64 `json:"leave_virtual_ms"`
	CrashMoved        int     `json:"crash_moved"`
	CrashOptimal      int     `json:"crash_optimal"`
	CrashVirtualMs    float64 `json:"crash_virtual_ms"`
	LedgerEntries     uint64  `json:"ledger_entries"`

	// Gossip (real time, memberlist over cluster.MemNetwork).
	GossipNodes        int     `json:"gossip_nodes"`
	GossipProfile      string  `json:"gossip_profile"`
	GossipConvergeMs   float64 `json:"gossip_converge_ms"`
	IdleSeconds        float64 `json:"idle_seconds"`
	HeapPerNodeKB      float64 `json:"heap_per_node_kb"`
	GoroutinesPerNode  float64 `json:"goroutines_per_node"`
	CPUPerIdleNodePct  float64 `json:"cpu_per_idle_node_pct"`
	ProcessRSSMB       float64 `json:"process_rss_mb"`
	PacketsPerNodePerS float64 `json:"packets_per_node_per_s"`
}

func runBenchScale(ctx context.Context, m *Env, args []string) error {
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	nodes := fs.Int("nodes", 100, "number of nodes")
	shards := fs.Int("shards", 4096, "number of shards (ring partitions)")
	profile := fs.String("profile", "default", "lease profile: fast, default or safe")
	idle := fs.Duration("idle", 5*time.Second, "gossip: how long to measure the idle cluster")
	noGossip := fs.Bool("no-gossip", false, "skip the gossip part")
	gossipProfile := fs.String("gossip-profile", "lan", "gossip timings: lan (memberlist LAN defaults) or local (fast loopback timings)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	real := fs.Bool("real", false, "start -nodes real agent processes on this machine (-voters with data dirs, the rest disk-less members, workload off) instead of the in-process emulation")
	var ro realScaleOptions
	parseRealScaleFlags(fs, &ro)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench scale: unexpected arguments %q", fs.Args())
	}
	if *real {
		ro.nodes, ro.shards, ro.profile, ro.idle, ro.json = *nodes, *shards, *profile, *idle, *asJSON
		if _, err := profileConfig(ro.profile); err != nil {
			return fmt.Errorf("bench scale: %w", err)
		}
		return runBenchScaleReal(ctx, m, ro)
	}
	cfg, err := profileConfig(*profile)
	if err != nil {
		return fmt.Errorf("bench scale: %w", err)
	}
	switch {
	case *nodes < 2 || *nodes > 10_000:
		return fmt.Errorf("bench scale: -nodes %d: want 2..10000", *nodes)
	case *shards < *nodes || *shards > 1<<20:
		return fmt.Errorf("bench scale: -shards %d: want %d (nodes)..%d", *shards, *nodes, 1<<20)
	case *gossipProfile != "lan" && *gossipProfile != "local":
		return fmt.Errorf("bench scale: -gossip-profile %q: want lan or local", *gossipProfile)
	case *idle <= 0:
		return fmt.Errorf("bench scale: -idle %v must be positive", *idle)
	}
	cfg.Ring.Partitions = *shards
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("bench scale: %w", err)
	}
	res := scaleResult{Nodes: *nodes, Shards: *shards, Profile: *profile,
		Method: "ownership: real Planner + ledger FSM, emulated nodes, virtual time (no raft/network); gossip: real memberlist over cluster.MemNetwork"}
	progress := func(format string, a ...any) {
		fmt.Fprintf(m.Stderr, format+"\n", a...)
	}
	if err := scaleOwnership(ctx, cfg, *nodes, &res, progress); err != nil {
		return err
	}
	if !*noGossip {
		if err := scaleGossip(ctx, *nodes, *gossipProfile, *idle, &res, progress); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSONLine(m.Stdout, res)
	}
	w := m.Stdout
	fmt.Fprintf(w, "%d nodes, %d shards, profile %s\n", res.Nodes, res.Shards, res.Profile)
	fmt.Fprintf(w, "ownership (real Planner + ledger FSM, emulated nodes, virtual time):\n")
	fmt.Fprintf(w, "  converge to full, balanced ownership: %.0f ms virtual, %d rounds, %.0f ms CPU (plan round p50 %.2f ms, max %.2f ms)\n",
		res.ConvergeVirtualMs, res.ConvergeRounds, res.ConvergeCPUMs, res.PlanRoundP50Ms, res.PlanRoundMaxMs)
	fmt.Fprintf(w, "  load: min %d, avg %.1f, max %d\n", res.MinLoad, res.AvgLoad, res.MaxLoad)
	fmt.Fprintf(w, "  one join:  %d shards moved (optimal %d), settled in %.0f ms virtual\n", res.JoinMoved, res.JoinOptimal, res.JoinVirtualMs)
	fmt.Fprintf(w, "  one drain: %d shards moved (optimal %d), settled in %.0f ms virtual\n", res.LeaveMoved, res.LeaveOptimal, res.LeaveVirtualMs)
	fmt.Fprintf(w, "  one crash: %d shards moved (optimal %d), settled in %.0f ms virtual\n", res.CrashMoved, res.CrashOptimal, res.CrashVirtualMs)
	fmt.Fprintf(w, "  ledger entries applied: %d\n", res.LedgerEntries)
	if !*noGossip {
		fmt.Fprintf(w, "gossip (%d real memberlist instances, %s profile, over the in-memory transport, one process):\n", res.GossipNodes, res.GossipProfile)
		fmt.Fprintf(w, "  full membership view everywhere after %.0f ms\n", res.GossipConvergeMs)
		fmt.Fprintf(w, "  idle %.0f s: heap %.0f KiB/node, %.1f goroutines/node, CPU %.2f%% of a core/node, %.1f packets/node/s, process RSS %.0f MiB\n",
			res.IdleSeconds, res.HeapPerNodeKB, res.GoroutinesPerNode, res.CPUPerIdleNodePct, res.PacketsPerNodePerS, res.ProcessRSSMB)
	}
	return nil
}

// profileConfig maps a profile name to its ownership configuration.
func profileConfig(name string) (ownership.Config, error) {
	switch name {
	case "fast":
		return ownership.FastConfig(), nil
	case "default":
		return ownership.DefaultConfig(), nil
	case "safe":
		return ownership.SafeConfig(), nil
	}
	return ownership.Config{}, fmt.Errorf("profile %q: want fast, default or safe", name)
}

// scaleSim drives the real planner against the real ledger FSM in virtual
// time. Nodes are emulated: each heartbeats every RenewEvery (committed at
// once), and an owner hands a revoked shard to its target at once (an
// application with no drain time). Every command goes through FSM, so the
// ledger's compare-and-set rules apply.
type scaleSim struct {
	cfg     ownership.Config
	fsm     *ledger.FSM
	planner *ownership.Planner
	index   uint64
	now     time.Time
	nodes   map[string]*simNode
	ids     []string
	rounds  int
	planDur []time.Duration
	changes int // non-heartbeat commands applied in the last step
}

type simNode struct {
	id       string
	inc      uint64
	liveness uint64
	nextHB   time.Time
	dead     bool
	draining bool
}

const scaleRound = 100 * time.Millisecond

func newScaleSim(cfg ownership.Config) (*scaleSim, error) {
	f, err := ledger.NewFSM(ledger.DefaultConfig())
	if err != nil {
		return nil, err
	}
	p, err := ownership.NewPlanner(cfg)
	if err != nil {
		return nil, err
	}
	return &scaleSim{cfg: cfg, fsm: f, planner: p, now: time.Unix(1_700_000_000, 0), nodes: map[string]*simNode{}}, nil
}

func (s *scaleSim) apply(c ledger.Command) ledger.Result {
	s.index++
	return s.fsm.ApplyCommand(s.index, c)
}

func (s *scaleSim) addNode(id string) {
	n := &simNode{id: id, inc: 1, nextHB: s.now}
	s.nodes[id] = n
	s.ids = append(s.ids, id)
	slices.Sort(s.ids)
}

// step advances one round: heartbeats, node handoffs, one planner round.
func (s *scaleSim) step() error {
	s.now = s.now.Add(scaleRound)
	s.changes = 0
	for _, id := range s.ids {
		n := s.nodes[id]
		if n.dead || s.now.Before(n.nextHB) {
			continue
		}
		n.nextHB = s.now.Add(s.cfg.RenewEvery)
		r := s.apply(ledger.Heartbeat{Node: id, Incarnation: n.inc, Liveness: n.liveness, Now: s.now.UnixNano()})
		if r.Err != nil {
			// Expired: re-register at the current liveness epoch.
			n.liveness = r.Node.Liveness
			s.apply(ledger.Heartbeat{Node: id, Incarnation: n.inc, Liveness: n.liveness, Now: s.now.UnixNano()})
		} else {
			n.liveness = r.Node.Liveness
		}
	}
	st := s.fsm.State()
	for _, rec := range st.Shards() {
		if rec.State != ledger.ShardRevoking {
			continue
		}
		owner := s.nodes[rec.Owner]
		if owner == nil || owner.dead {
			continue
		}
		to, ok := st.Node(rec.Target)
		s.changes++
		if ok && !to.Draining && rec.Target != rec.Owner {
			s.apply(ledger.Transfer{Shard: rec.Shard, Epoch: rec.Epoch, From: rec.Owner, To: rec.Target,
				ToIncarnation: to.Incarnation, ToLiveness: to.Liveness, Now: s.now.UnixNano(), Reason: "handoff"})
		} else {
			s.apply(ledger.Release{Shard: rec.Shard, Epoch: rec.Epoch, Owner: rec.Owner, Now: s.now.UnixNano()})
		}
	}
	st = s.fsm.State()
	members := make([]ownership.Member, 0, len(s.ids))
	for _, id := range s.ids {
		n := s.nodes[id]
		m := ownership.Member{ID: id, Incarnation: n.inc, Health: 1, Draining: n.draining}
		if n.dead {
			m.State = member.Dead
		}
		members = append(members, m)
	}
	in := ownership.InputOf(st, members)
	t0 := time.Now()
	if !s.planner.Leading() {
		s.planner.Establish(s.now, in, time.Time{})
	}
	cmds, err := s.planner.Plan(s.now, in)
	s.planDur = append(s.planDur, time.Since(t0))
	if err != nil {
		return err
	}
	for _, c := range cmds {
		s.apply(c)
	}
	s.changes += len(cmds)
	s.rounds++
	return nil
}

// owners returns every shard's valid owner ("" when none).
func (s *scaleSim) owners() []string {
	st := s.fsm.State()
	out := make([]string, s.cfg.Ring.Partitions)
	for i := range out {
		if rec, ok := st.ValidOwner(uint32(i)); ok && rec.State == ledger.ShardOwned {
			out[i] = rec.Owner
		}
	}
	return out
}

// settled reports whether the placement ring is exactly the live,
// non-draining nodes, every shard has a valid owner in it, and the last
// round changed nothing.
func (s *scaleSim) settled() bool {
	if s.changes > 0 {
		return false
	}
	var want []string
	for _, id := range s.ids {
		if n := s.nodes[id]; !n.dead && !n.draining {
			want = append(want, id)
		}
	}
	ring := s.planner.RingMembers()
	if !slices.Equal(ring, want) {
		return false
	}
	for _, o := range s.owners() {
		if o == "" || !slices.Contains(ring, o) {
			return false
		}
	}
	return true
}

// runUntilSettled steps until settled, or until limit of virtual time.
func (s *scaleSim) runUntilSettled(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := s.now
	for s.now.Sub(start) < limit {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := s.step(); err != nil {
			return 0, err
		}
		if s.settled() {
			return s.now.Sub(start), nil
		}
	}
	return 0, fmt.Errorf("bench scale: not settled after %v of virtual time", limit)
}

func countMoved(before, after []string) int {
	n := 0
	for i := range before {
		if before[i] != after[i] {
			n++
		}
	}
	return n
}

func loads(owners []string) map[string]int {
	l := map[string]int{}
	for _, o := range owners {
		l[o]++
	}
	return l
}

func scaleOwnership(ctx context.Context, cfg ownership.Config, nodes int, res *scaleResult, progress func(string, ...any)) error {
	s, err := newScaleSim(cfg)
	if err != nil {
		return err
	}
	for i := range nodes {
		s.addNode(fmt.Sprintf("node-%04d", i))
	}
	limit := 10*time.Minute + 100*cfg.StableFor
	cpu0 := processCPU()
	d, err := s.runUntilSettled(ctx, limit)
	if err != nil {
		return err
	}
	res.ConvergeCPUMs = float64((processCPU() - cpu0).Microseconds()) / 1000
	res.ConvergeVirtualMs = float64(d.Milliseconds())
	res.ConvergeRounds = s.rounds
	sorted := slices.Clone(s.planDur)
	slices.Sort(sorted)
	res.PlanRoundP50Ms = float64(sorted[len(sorted)/2].Microseconds()) / 1000
	res.PlanRoundMaxMs = float64(sorted[len(sorted)-1].Microseconds()) / 1000
	owners := s.owners()
	l := loads(owners)
	res.MinLoad, res.MaxLoad = len(owners), 0
	for _, id := range s.ids {
		res.MinLoad = min(res.MinLoad, l[id])
		res.MaxLoad = max(res.MaxLoad, l[id])
	}
	res.AvgLoad = float64(len(owners)) / float64(nodes)
	progress("ownership: %d nodes converged in %.0f ms virtual (%d rounds)", nodes, res.ConvergeVirtualMs, s.rounds)

	// One join.
	joiner := fmt.Sprintf("node-%04d", nodes)
	s.addNode(joiner)
	if d, err = s.runUntilSettled(ctx, limit); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	after := s.owners()
	res.JoinMoved, res.JoinOptimal, res.JoinVirtualMs = countMoved(owners, after), loads(after)[joiner], float64(d.Milliseconds())
	progress("ownership: join moved %d shards (the joiner owns %d)", res.JoinMoved, res.JoinOptimal)

	// One drain (graceful leave): the drained node's shards must move.
	owners = after
	drained := s.ids[0]
	dn := s.nodes[drained]
	s.apply(ledger.SetDraining{Node: drained, Incarnation: dn.inc, Draining: true, Now: s.now.UnixNano()})
	dn.draining = true
	if d, err = s.runUntilSettled(ctx, limit); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	after = s.owners()
	res.LeaveMoved, res.LeaveOptimal, res.LeaveVirtualMs = countMoved(owners, after), loads(owners)[drained], float64(d.Milliseconds())
	progress("ownership: drain moved %d shards (the drained node owned %d)", res.LeaveMoved, res.LeaveOptimal)

	// One crash: a node stops heartbeating.
	owners = after
	crashed := s.ids[1]
	s.nodes[crashed].dead = true
	if d, err = s.runUntilSettled(ctx, limit); err != nil {
		return fmt.Errorf("crash: %w", err)
	}
	after = s.owners()
	res.CrashMoved, res.CrashOptimal, res.CrashVirtualMs = countMoved(owners, after), loads(owners)[crashed], float64(d.Milliseconds())
	progress("ownership: crash moved %d shards (the crashed node owned %d)", res.CrashMoved, res.CrashOptimal)
	res.LedgerEntries = s.index
	return nil
}

// scaleGossip starts n memberlist instances (local profile) over one
// in-memory network, waits until each sees all n alive, then measures the
// idle cluster.
func scaleGossip(ctx context.Context, n int, profile string, idle time.Duration, res *scaleResult, progress func(string, ...any)) error {
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	net := cluster.NewMemNetwork(1)
	var members []*cluster.Membership
	defer func() {
		for _, m := range members {
			m.Shutdown()
		}
	}()
	start := time.Now()
	for i := range n {
		addr := fmt.Sprintf("10.%d.%d.%d:7946", i/65536%256, i/256%256, i%256+1)
		tr, err := net.NewTransport(addr)
		if err != nil {
			return err
		}
		cfg := cluster.DefaultLANConfig()
		if profile == "local" {
			cfg = cluster.DefaultLocalConfig()
		}
		cfg.Name = fmt.Sprintf("node-%04d", i)
		cfg.Transport = tr
		cfg.RejoinInterval = 0
		m, err := cluster.NewMembership(cfg, cluster.Meta{ID: cfg.Name, Incarnation: 1, Health: 1})
		if err != nil {
			return fmt.Errorf("bench scale: gossip node %d: %w", i, err)
		}
		members = append(members, m)
		if i > 0 {
			if _, err := m.Join(ctx, []string{members[0].Local().Addr}); err != nil {
				return fmt.Errorf("bench scale: gossip node %d: %w", i, err)
			}
		}
	}
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*100*time.Millisecond)
	for {
		minAlive, suspect, dead := n, 0, 0
		for _, m := range members {
			alive := 0
			for _, mm := range m.Members() {
				switch mm.State {
				case cluster.StateAlive:
					alive++
				case cluster.StateSuspect:
					suspect++
				case cluster.StateDead:
					dead++
				}
			}
			minAlive = min(minAlive, alive)
		}
		if minAlive == n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench scale: gossip never converged to a full view: some node sees %d of %d alive; %d suspect and %d dead entries over all views (network %+v)",
				minAlive, n, suspect, dead, net.Stats())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	res.GossipNodes, res.GossipProfile = n, profile
	res.GossipConvergeMs = float64(time.Since(start).Milliseconds())
	progress("gossip: %d nodes see each other after %.0f ms; measuring %v idle", n, res.GossipConvergeMs, idle)
	st0 := net.Stats()
	cpu0, t0 := processCPU(), time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idle):
	}
	wall := time.Since(t0)
	cpu := processCPU() - cpu0
	st1 := net.Stats()
	runtime.GC()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	res.IdleSeconds = wall.Seconds()
	res.CPUPerIdleNodePct = 100 * cpu.Seconds() / wall.Seconds() / float64(n)
	res.HeapPerNodeKB = float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / 1024 / float64(n)
	res.GoroutinesPerNode = float64(runtime.NumGoroutine()-g0) / float64(n)
	res.PacketsPerNodePerS = float64(st1.Delivered-st0.Delivered) / wall.Seconds() / float64(n)
	res.ProcessRSSMB = processRSSMB()
	return nil
}
