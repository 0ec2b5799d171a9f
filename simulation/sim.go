package simulation

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// Config describes one simulated run. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	// Seed drives every random choice of the run (one *rand.Rand).
	Seed uint64
	// Profile names the constructor ("default", "quick") for replay hints.
	Profile string
	// Nodes is the number of nodes at start; Voters of them (the first)
	// form the control group.
	Nodes  int
	Voters int
	// Duration is the simulated time of the run.
	Duration time.Duration
	// FaultsUntil ends fault injection: at that time every fault heals
	// (crashed nodes restart, partitions heal, health recovers, drains end)
	// and the liveness checks (L1, L2) run at the end of the run.
	FaultsUntil time.Duration
	// Faults is the fault schedule. When nil and RandomFaults is set, a
	// schedule is drawn from the seed (see GenerateFaults).
	Faults       []Fault
	RandomFaults bool
	// Ownership is the protocol configuration every node uses.
	Ownership ownership.Config
	// ClockRateError is the largest clock rate error drawn for a node (a
	// fraction); S4 is only promised while it is ≤ Ownership.MaxDrift.
	ClockRateError float64
	// ClockRates, when set, gives node i's initial clock rate (1 = exact)
	// instead of a random one within ClockRateError.
	ClockRates []float64
	// Stress draws about three times as many faults, biased to pauses,
	// slow replicas, drains and leader crashes (mutation tests).
	Stress bool
	// StateMachines are application state machines (by App command type)
	// registered on every replica, as an application registers them with
	// its node. Every replica that applied the whole log must end with the
	// same Snapshot.
	StateMachines map[string]func() ledger.StateMachine
	// Workers run on every node for every shard it acts on (Owned, not
	// draining), a few times per second; what they return is proposed.
	Workers []Worker
	// Workload enables the job and application-command workload.
	Workload bool
	// Probes commits, every ~100 ms, a command built to break one rule of
	// the ledger's contract in the committed state (see probe.go); the
	// history checker demands its documented rejection.
	Probes bool
	// Trace receives a line per event when non-nil.
	Trace io.Writer
	// StopAtFirstViolation ends the run at the first violation.
	StopAtFirstViolation bool
	// Watch lists shards whose acting changes are recorded in
	// Result.Timeline.
	Watch []uint32
	// Zones and Weights, when set, give node i's gossiped zone and weight
	// (ownership.Member.Zone, Weight); the end-of-run L2 check places with
	// them too.
	Zones   []string
	Weights []int
	// ShardLoads, when non-nil, makes every node gossip a load summary of
	// the shards it acts on (ownership.Member.Load: its total and its 3
	// hottest), each shard weighing ShardLoads[shard] or 1 if unlisted; the
	// leader balances load (Ownership.Load). Result.LoadMaxOverAvg reports
	// the end.
	ShardLoads map[uint32]float64
	// SharedReplicas makes nodes read the reference replica's state at
	// their applied index instead of applying every entry to a replica of
	// their own (every replica applies the same log: the states are equal
	// by construction). A run's events and outcome are the same; the cost
	// of applying falls from nodes × entries to entries. A node that
	// restarts after the oldest kept state was dropped replays into a
	// replica of its own, which the end-of-run check compares with the
	// reference. ScaleConfig sets it.
	SharedReplicas bool
	// Fenced puts these shards under fenced takeover
	// (ledger.SetTakeoverPolicy): before the nodes start, the log gets a
	// ClusterConfig at ledger.VersionFencedTakeover and the policy, as an
	// operator would commit them. The checker waives S4 for these shards
	// (two owners may act at once) and still checks S2: every fenced
	// command is accepted only at the shard's current epoch.
	Fenced []ledger.ShardRange
	// ClusterVersion is the newest cluster version the nodes' binaries
	// speak (0: ledger.MaxClusterVersion). The leader records the cluster's
	// configuration at the version every live node speaks; from
	// ledger.VersionLeaseRenewals (4) on, nodes renew their leases with the
	// leader, confirmed by a quorum round, instead of committing
	// heartbeats (renew.go).
	ClusterVersion uint32
	// ElectionDelay is the range of the time from losing the control
	// group's leader (crash, pause, lost quorum) to a new leader being
	// elected: [0] to [1], uniform; zero means 300–700 ms. A profile's
	// range follows from its Raft heartbeat timeout (ElectionDelayFor).
	ElectionDelay [2]time.Duration
	// UpgradeAt, when non-zero, upgrades every node's binary to
	// ledger.MaxClusterVersion at that time: a rolling restart, one node
	// every 700 ms (each down 200 ms, a new incarnation); the leader raises
	// the cluster version once every live node speaks it.
	UpgradeAt time.Duration
	// LoseTransfers is the chance that a Transfer reaching the leader is
	// lost before its commit (the leader dies or is deposed; at version 6
	// after it relayed the old owner's word): the old owner offers it
	// again after RenewEvery. Zero: never.
	LoseTransfers float64
}

// DefaultConfig is a 5-node cluster (3 voters) with the ownership test
// profile (its DrainTimeout raised to the Lease), 15 s simulated with
// random faults during the first 5 s: the 10 s after them are at least
// quietNeeded (9.6 s), so the liveness checks (L1–L3) judge every run
// (TestDefaultConfigJudgesLiveness).
func DefaultConfig(seed uint64) Config {
	oc := ownership.TestConfig()
	// DrainTimeout >= Lease, as in every production profile: with a drain
	// shorter than the lease, a drain deadline always ends acting before the
	// lease does, and the rules that bound draining by the lease
	// (drain-ignores-lease) or wait out the drain (takeover-without-drain)
	// are never exercised.
	oc.DrainTimeout = oc.Lease
	return Config{
		Seed:           seed,
		Profile:        "default",
		Nodes:          5,
		Voters:         3,
		Duration:       15 * time.Second,
		FaultsUntil:    5 * time.Second,
		RandomFaults:   true,
		Ownership:      oc,
		ClockRateError: oc.MaxDrift,
		Workload:       true,
		Probes:         true,
	}
}

// ElectionDelayFor is the range of ElectionDelay for a control group whose
// Raft heartbeat timeout is ht (hashicorp/raft): a follower checks for
// contact with the leader at random intervals in [ht, 2·ht) and starts an
// election at the first check that finds none for ht, i.e. ht to 3·ht
// after the last contact; the pre-vote and vote rounds add a few
// milliseconds.
func ElectionDelayFor(ht time.Duration) [2]time.Duration {
	return [2]time.Duration{ht, 3*ht + 20*time.Millisecond}
}

// ProfileConfig is DefaultConfig with a production profile's lease timing
// (oc: ownership.FastConfig, DefaultConfig, ...) and the election delay of
// its Raft heartbeat timeout ht, on the simulator's 16 shards and with
// DrainTimeout ≥ Lease (DefaultConfig); clocks err up to the profile's δ.
func ProfileConfig(seed uint64, name string, oc ownership.Config, ht time.Duration) Config {
	c := DefaultConfig(seed)
	oc.Ring.Partitions = c.Ownership.Ring.Partitions
	oc.DrainTimeout = max(oc.DrainTimeout, oc.Lease)
	c.Profile, c.Ownership, c.ClockRateError = name, oc, oc.MaxDrift
	c.ElectionDelay = ElectionDelayFor(ht)
	return c
}

// QuickConfig is the bulk profile `go test` runs thousands of: 4 nodes (3
// voters), 8 shards, 3 s simulated with random faults during the first
// 2 s. Too short to judge liveness (DefaultConfig does that); every
// safety checker runs.
func QuickConfig(seed uint64) Config {
	c := DefaultConfig(seed)
	c.Profile = "quick"
	c.Nodes = 4
	c.Duration = 3 * time.Second
	c.FaultsUntil = 2 * time.Second
	c.Ownership.Ring.Partitions = 8
	return c
}

// ScaleConfig is the scale profile (TestSimScale): nodes nodes (3 voters)
// and shards shards with the default lease timing (1.5 s lease, 250 ms
// renewals) and a churn budget of 256 moves, random faults for the first
// 5 s of 13 s, probes on and the job workload off: every node still runs
// the real agent core over its own replica of the whole log, the leader the
// real planner over every member and shard.
func ScaleConfig(seed uint64, nodes, shards int) Config {
	c := DefaultConfig(seed)
	c.Profile = "scale"
	c.Nodes = nodes
	c.Ownership = ownership.DefaultConfig()
	c.Ownership.MaxMovesInFlight = 256
	c.Ownership.Ring.Partitions = shards
	c.ClockRateError = c.Ownership.MaxDrift
	c.Workload = false
	c.SharedReplicas = true
	c.Duration = 13 * time.Second
	return c
}

// Worker is application code the simulator runs on acting owners, with
// the node's own ledger replica: the seam for testing an application's
// workers and job handlers under faults.
type Worker interface {
	// Tick is called on node while it acts on shard at epoch; st is the
	// node's replica, now its wall clock (unix ns). The commands returned
	// (jobs, App commands fenced by epoch, ...) are proposed; rejections
	// are expected and ignored.
	Tick(node string, shard uint32, epoch uint64, st *ledger.State, now int64) []ledger.Command
}

// WorkerFunc adapts a function to Worker.
type WorkerFunc func(node string, shard uint32, epoch uint64, st *ledger.State, now int64) []ledger.Command

// Tick calls f.
func (f WorkerFunc) Tick(node string, shard uint32, epoch uint64, st *ledger.State, now int64) []ledger.Command {
	return f(node, shard, epoch, st, now)
}

// Errors.
var (
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("simulation: invalid config")
)

// MaxNodes bounds Config.Nodes (`make sim SIMSCALE=10000` runs TestSimScale
// at 10,000; docs/simulation.md, "Scale").
const MaxNodes = 10_000

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.ElectionDelay[0] < 0 || c.ElectionDelay[1] < c.ElectionDelay[0]:
		return fmt.Errorf("%w: ElectionDelay = %v, want 0 ≤ [0] ≤ [1]", ErrInvalidConfig, c.ElectionDelay)
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return fmt.Errorf("%w: Nodes = %d, want 1..%d", ErrInvalidConfig, c.Nodes, MaxNodes)
	case c.Voters < 1 || c.Voters > c.Nodes:
		return fmt.Errorf("%w: Voters = %d, want 1..Nodes (%d)", ErrInvalidConfig, c.Voters, c.Nodes)
	case c.Duration <= 0 || c.FaultsUntil < 0 || c.FaultsUntil > c.Duration:
		return fmt.Errorf("%w: Duration = %v, FaultsUntil = %v, want 0 ≤ FaultsUntil ≤ Duration", ErrInvalidConfig, c.Duration, c.FaultsUntil)
	case c.ClockRateError < 0 || c.ClockRateError >= 1:
		return fmt.Errorf("%w: ClockRateError = %v, want in [0, 1)", ErrInvalidConfig, c.ClockRateError)
	case c.LoseTransfers < 0 || c.LoseTransfers >= 1:
		return fmt.Errorf("%w: LoseTransfers = %v, want in [0, 1)", ErrInvalidConfig, c.LoseTransfers)
	case c.ClusterVersion > ledger.MaxClusterVersion:
		return fmt.Errorf("%w: ClusterVersion = %d, want 0..%d", ErrInvalidConfig, c.ClusterVersion, ledger.MaxClusterVersion)
	case c.UpgradeAt < 0 || c.UpgradeAt > c.Duration:
		return fmt.Errorf("%w: UpgradeAt = %v, want 0..Duration", ErrInvalidConfig, c.UpgradeAt)
	}
	for typ, mk := range c.StateMachines {
		if typ == "" || typ == appType || mk == nil {
			return fmt.Errorf("%w: StateMachines[%q]: empty, reserved or nil", ErrInvalidConfig, typ)
		}
	}
	return c.Ownership.Validate()
}

// Violation is one broken guarantee.
type Violation struct {
	At     time.Duration // simulated (true) time
	Rule   string        // "S1".."S4", "L1".."L3", "replica"
	Detail string
}

// String renders the violation in one line.
func (v Violation) String() string { return fmt.Sprintf("%v %s: %s", v.At, v.Rule, v.Detail) }

// Result summarizes one run.
type Result struct {
	Seed   uint64
	Stress bool
	// Config is the configuration that ran (for replay and shrinking).
	Config     Config
	Events     uint64
	Commits    uint64
	Simulated  time.Duration
	Violations []Violation
	// ViolationCounts counts every violation by rule, also those past the
	// 20 Violations keeps.
	ViolationCounts map[string]int
	// TraceHash is a hash of the event sequence and every committed
	// command: equal seeds give equal hashes.
	TraceHash uint64
	// Faults is the schedule that ran.
	Faults []Fault
	// Timeline lists acting changes of the watched shards.
	Timeline []string
	// Stats.
	LeaderChanges, Takeovers, Handoffs, Expiries int
	// ExpiriesCommitted counts the ExpireNode commands the ledger
	// accepted (Expiries counts those proposed, some by a leader that is
	// already cut off).
	ExpiriesCommitted int
	// FencedOverlaps counts the times a node started acting on a shard
	// under fenced takeover while another still acted on it (S4 is waived
	// there; Config.Fenced).
	FencedOverlaps int
	MaxHandoffGap  time.Duration
	// HandoffGaps are the gaps of every planned move (a stop while a
	// Revoke was in progress → the next start), faults or not, in order
	// (at most 65536).
	HandoffGaps []time.Duration
	// Renewals counts lease renewals acked (cluster version 4) and
	// ConfirmRounds the leaders' quorum rounds that confirmed them.
	Renewals, ConfirmRounds int
	// WordStarts counts the times a target started acting on a shard on
	// its old owner's word, before the Transfer applied (cluster version
	// 6, words.go); WordsRelayed the words leaders relayed.
	WordStarts, WordsRelayed int
	// RevokeFaults counts the DuringRevoke faults that fired.
	RevokeFaults int
	// ZoneShards counts the committed owners' partitions per zone at the
	// end (Config.Zones); LoadMaxOverAvg is the most loaded node's load
	// over its weighted share at the end (Config.ShardLoads).
	ZoneShards     map[string]int
	LoadMaxOverAvg float64
}

// Failed reports whether any guarantee was violated.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// event is one scheduled action.
type event struct {
	at   int64
	seq  uint64
	kind uint8
	node int
	fn   func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// Sim is one simulated world. It is single-threaded: everything happens in
// Run's event loop, in (time, sequence) order.
type Sim struct {
	cfg    Config
	rng    *rand.Rand
	now    int64
	seq    uint64
	queue  eventHeap
	hash   *xxhash.Digest
	res    Result
	stop   bool
	healed bool

	nodes  []*node
	raft   *raftModel
	gossip *gossipModel
	check  *checker
	faults []Fault
	// ridSeq numbers the request ids the workload draws; requestIDs keeps
	// up to maxRequestIDs recent ones for the probes (work.go).
	ridSeq     uint64
	requestIDs []ledger.RequestID
}

// event kinds, for the trace hash.
const (
	evFault uint8 = iota + 1
	evHeartbeat
	evCommit
	evDeliver
	evApply
	evRound
	evElection
	evGossip
	evWake
	evWork
	evHeal
	evProbe
	evRenew
	evConfirm
	evWord
)

// at schedules fn at true time t (ns).
func (s *Sim) at(t int64, kind uint8, node int, fn func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	heap.Push(&s.queue, &event{at: t, seq: s.seq, kind: kind, node: node, fn: fn})
}

func (s *Sim) after(d time.Duration, kind uint8, node int, fn func()) {
	s.at(s.now+int64(d), kind, node, fn)
}

func (s *Sim) tracef(format string, args ...any) {
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "%12s ", time.Duration(s.now))
		fmt.Fprintf(s.cfg.Trace, format, args...)
		fmt.Fprintln(s.cfg.Trace)
	}
}

func (s *Sim) hashInts(vs ...int64) {
	var b [8]byte
	for _, v := range vs {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		_, _ = s.hash.Write(b[:])
	}
}

// jitter returns a uniform duration in [lo, hi].
func (s *Sim) jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

func (s *Sim) chance(p float64) bool { return s.rng.Float64() < p }

// Run runs one simulation to its end and returns the result.
func Run(cfg Config) (*Result, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return s.Run(), nil
}

// New builds a world; Run runs it.
func New(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ClusterVersion == 0 {
		cfg.ClusterVersion = ledger.MaxClusterVersion
	}
	if cfg.Ownership.ClusterName == "" {
		// The leader records the cluster's configuration and raises its
		// version as the nodes' binaries allow.
		cfg.Ownership.ClusterName = "sim"
	}
	s := &Sim{
		cfg:  cfg,
		rng:  rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		hash: xxhash.New(),
	}
	s.res.Seed = cfg.Seed
	s.res.Stress = cfg.Stress
	s.res.Config = cfg
	s.res.Config.Trace = nil
	s.faults = cfg.Faults
	if s.faults == nil && cfg.RandomFaults {
		s.faults = GenerateFaults(cfg)
	}
	s.res.Faults = s.faults
	s.check = newChecker(s)
	s.raft = newRaft(s)
	s.gossip = newGossip(s)
	for i := range cfg.Nodes {
		if err := s.addNode(i < cfg.Voters); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run runs the event loop until the configured duration.
func (s *Sim) Run() *Result {
	s.fencedSetup()
	for i := range s.nodes {
		s.start(s.nodes[i], false)
	}
	s.raft.checkLeader()
	for i, f := range s.faults {
		s.at(int64(f.At), evFault, f.Node, func() { s.applyFault(i, f) })
	}
	s.at(int64(s.cfg.FaultsUntil), evHeal, -1, s.healAll)
	if s.cfg.UpgradeAt > 0 {
		s.at(int64(s.cfg.UpgradeAt), evFault, -1, s.upgrade)
	}
	if s.cfg.Probes {
		s.scheduleProbe()
	}
	end := int64(s.cfg.Duration)
	for len(s.queue) > 0 && !s.stop {
		e := heap.Pop(&s.queue).(*event)
		if e.at > end {
			break
		}
		s.now = e.at
		s.res.Events++
		s.hashInts(e.at, int64(e.kind), int64(e.node))
		e.fn()
	}
	s.now = max(s.now, end)
	if !s.stop {
		s.check.final()
	}
	s.res.Simulated = time.Duration(s.now)
	s.res.TraceHash = s.hash.Sum64()
	s.res.LeaderChanges = s.raft.elections
	return &s.res
}

// violate records a broken guarantee.
func (s *Sim) violate(rule, format string, args ...any) {
	v := Violation{At: time.Duration(s.now), Rule: rule, Detail: fmt.Sprintf(format, args...)}
	s.tracef("VIOLATION %s", v)
	if len(s.res.Violations) < 20 {
		s.res.Violations = append(s.res.Violations, v)
	}
	if s.res.ViolationCounts == nil {
		s.res.ViolationCounts = map[string]int{}
	}
	s.res.ViolationCounts[rule]++
	if s.cfg.StopAtFirstViolation {
		s.stop = true
	}
}

// ledgerConfig is the FSM configuration of every replica.
func ledgerConfig() ledger.Config {
	return ledger.DefaultConfig()
}
