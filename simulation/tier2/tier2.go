package tier2

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/node"
)

// Scenario is one run: a cluster of real nodes, the application code they
// run, and the faults injected into them.
type Scenario struct {
	// Name labels the scenario in reports.
	Name string
	// Seed drives the random fault schedule, the networks' loss and
	// jitter, and the default application's timing. A seed reproduces a
	// run's schedule, not its exact interleaving (see the package doc).
	Seed int64
	// Nodes is the cluster size (default 3; the first three are voters).
	Nodes int
	// Diskless is how many of the nodes, the last ones, run as disk-less
	// members (node.Config.Diskless, Voter=never): no storage kept across
	// restarts, an incarnation claimed from the control group at every
	// start. The others keep theirs (in memory, across restarts) and the
	// first min(3, Nodes−Diskless) of them are the voters.
	Diskless int
	// Partitions is the number of shards (default 8).
	Partitions int
	// Profile is the nodes' timing profile (default node.ProfileFast).
	Profile node.Profile
	// Duration is the run's virtual length (default 60 s).
	Duration time.Duration
	// FaultsUntil is when faults stop (default Duration − 25 s); liveness
	// is judged after it.
	FaultsUntil time.Duration
	// Faults is a scripted fault schedule. When it is empty and
	// RandomFaults is set, faults are drawn from Seed.
	Faults       []Fault
	RandomFaults bool
	// L1Bound is how long after FaultsUntil every shard must have an
	// acting owner (default 15 s).
	L1Bound time.Duration
	// Fenced are shard ranges put under fenced takeover
	// (node.SetFencedTakeover) once the cluster has settled, before any
	// fault: their owner, once the leader believes it dead, is succeeded
	// at once, without waiting out its lease. S4 is waived for them (an
	// overlap is counted in Result.FencedOverlaps, not reported); S2 is
	// not. Empty: no shard is.
	Fenced []node.ShardRange
	// App is the application under test; the zero App runs the built-in
	// workload (fenced commands to a replicated log, jobs).
	App App
	// Replay is printed with a failing seed (by Test); default "rerun with
	// Scenario.Seed = N".
	Replay string
}

// App is the application code every node runs, as it would in
// production.
type App struct {
	// StateMachines returns fresh application state machines for one
	// start of node id (a restarted node replays its log into new
	// instances). Nil: none besides the harness's own.
	StateMachines func(id string) map[string]node.StateMachine
	// Worker runs on every shard a node acts on, through
	// node.RunPerShard. The harness records when it starts and returns
	// as the node's acting interval on the shard (S4), so it must return
	// promptly once ctx is done — as in production. Nil: no worker (the
	// intervals are then the empty worker's).
	Worker func(ctx context.Context, env *Env, tok node.Token) error
	// JobsPerSecond is how many jobs the harness enqueues (through a
	// random live node, with idempotency keys, type "tier2"). Workers run
	// them with Env.RunJobs.
	JobsPerSecond float64
	// Check, if set, runs once the faults stopped and every live node
	// caught up; its error is reported as an "app" violation.
	Check func(nodes []*node.Node) error
}

// Result is what a run observed.
type Result struct {
	Scenario   Scenario
	Violations []Violation
	// Terms are the recorded acting intervals, in begin order.
	Terms []Term
	// Faults are the faults applied, with their virtual start times.
	Faults []Fault
	// Applies counts commands applied over all replicas; Acks the
	// acknowledged application commands; JobsCompleted distinct completed
	// jobs; StaleProbes/StaleRejected the stale-token proposals tried and
	// rejected.
	Applies, Acks, JobsCompleted, StaleProbes, StaleRejected uint64
	// L1 is how long after FaultsUntil every shard had an acting owner
	// (-1 if never within L1Bound).
	L1 time.Duration
	// FencedOverlaps are the acting intervals of a shard under fenced
	// takeover that began while another node process still acted on it
	// (S4 waived for those shards: each would be an S4 violation
	// elsewhere), as "shard N: old -> new" lines.
	FencedOverlaps []string
	// StreamMembers counts the live members (Diskless) that had followed
	// the committed-state stream (cluster version 5) by the final checks.
	StreamMembers int
	// Version is the highest cluster version a committed ClusterConfig
	// set (ledger.VersionLeaseRenewals and above: leases renewed off the
	// log).
	Version uint32
	// Trace digests the whole recorded history (every apply on every
	// replica, every worker begin and end, every acknowledgement, with
	// virtual times) in the order it happened. Runs under the Go scheduler
	// differ; under tier 3 (wasip1, fixed randomness) a seed's Trace is
	// the same every time.
	Trace uint64
}

// Failed reports whether any guarantee was violated.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// withDefaults fills zero fields.
func (sc Scenario) withDefaults() Scenario {
	if sc.Nodes == 0 {
		sc.Nodes = 3
	}
	if sc.Partitions == 0 {
		sc.Partitions = 8
	}
	if sc.Profile == "" {
		sc.Profile = node.ProfileFast
	}
	if sc.Duration == 0 {
		sc.Duration = time.Minute
	}
	if sc.FaultsUntil == 0 {
		sc.FaultsUntil = max(sc.Duration-25*time.Second, 0)
	}
	if sc.L1Bound == 0 {
		sc.L1Bound = 15 * time.Second
	}
	if sc.Replay == "" {
		sc.Replay = fmt.Sprintf("rerun with Scenario.Seed = %d", sc.Seed)
	}
	return sc
}

// Validate reports every bad value of sc.
func (sc Scenario) Validate() error {
	sc = sc.withDefaults()
	var errs []error
	if sc.Nodes < 1 || sc.Nodes > 250 {
		errs = append(errs, fmt.Errorf("scenario nodes %d: want 1..250", sc.Nodes))
	}
	if sc.Diskless < 0 || sc.Diskless >= sc.Nodes {
		errs = append(errs, fmt.Errorf("scenario disk-less members %d: want 0..%d (the voters keep storage)", sc.Diskless, sc.Nodes-1))
	}
	if sc.FaultsUntil+sc.L1Bound > sc.Duration {
		errs = append(errs, fmt.Errorf("scenario faults until %v + L1 bound %v > Duration %v: no time left to judge liveness", sc.FaultsUntil, sc.L1Bound, sc.Duration))
	}
	for i, r := range sc.Fenced {
		if r.First > r.Last || int64(r.Last) >= int64(sc.Partitions) {
			errs = append(errs, fmt.Errorf("fenced range %d: %d-%d: want First ≤ Last < Partitions (%d)", i, r.First, r.Last, sc.Partitions))
		}
	}
	for i, f := range sc.Faults {
		if err := f.validate(sc.Nodes); err != nil {
			errs = append(errs, fmt.Errorf("fault %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrScenario, errors.Join(errs...))
	}
	return nil
}

// Errors.
var (
	// ErrScenario: Scenario.Validate found bad values.
	ErrScenario = errors.New("tier2: invalid scenario")
)

// Test runs sc in its own testing/synctest bubble and reports every
// violation as a test error naming the seed and how to replay it.
func Test(t *testing.T, sc Scenario) *Result {
	t.Helper()
	var res *Result
	synctest.Test(t, func(t *testing.T) {
		var err error
		res, err = Run(context.Background(), sc)
		if err != nil {
			t.Fatalf("tier2: scenario %q seed %d: %v", sc.Name, sc.Seed, err)
		}
	})
	if res != nil && res.Failed() {
		sc = res.Scenario
		for _, v := range res.Violations {
			t.Errorf("tier2: scenario %q seed %d: %s", sc.Name, sc.Seed, v)
		}
		t.Errorf("tier2: scenario %q failed with seed %d; replay: %s", sc.Name, sc.Seed, sc.Replay)
	}
	return res
}

// Run runs sc and returns what it observed. Call it inside a
// testing/synctest bubble (Test does): it starts real nodes whose timers
// run on the bubble's virtual clock. Outside a bubble it runs in real
// time. Violations are in the Result; the error is for a run that could
// not be set up.
func Run(ctx context.Context, sc Scenario) (*Result, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	sc = sc.withDefaults()
	h := newHarness(sc)
	return h.run(ctx)
}

// slot is one node identity; its process comes and goes.
type slot struct {
	i          int
	id         string
	gossip     string
	raft       string
	n          *node.Node // nil while down
	workerDone chan struct{}
}

type harness struct {
	sc  Scenario
	tr  *node.MemNetwork
	rec *recorder
	// streamMembers: live members on the stream at the final checks.
	streamMembers int

	rngMu sync.Mutex
	rng   *rand.Rand

	ctx    context.Context // the run; cancelled at teardown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	slots  []*slot
	faults []Fault
	jobSeq int
	dflt   *defaultApp // the built-in application, if used
}

func newHarness(sc Scenario) *harness {
	h := &harness{sc: sc, rng: rand.New(rand.NewPCG(uint64(sc.Seed), 0x7469_6572_32))}
	h.tr = &node.MemNetwork{Gossip: cluster.NewMemNetwork(sc.Seed), Raft: cluster.NewRaftMemNetwork(sc.Seed)}
	for i := range sc.Nodes {
		h.slots = append(h.slots, &slot{i: i, id: fmt.Sprintf("n%d", i+1),
			gossip: fmt.Sprintf("10.0.%d.%d:7946", i/250, i%250+1), raft: fmt.Sprintf("10.0.%d.%d:7947", i/250, i%250+1)})
	}
	if sc.App.Worker == nil && sc.App.StateMachines == nil && sc.App.Check == nil && sc.App.JobsPerSecond == 0 {
		h.dflt = newDefaultApp(h)
		h.sc.App = h.dflt.app()
	}
	return h
}

// float returns a uniform random number in [0,1) from the seeded source.
func (h *harness) float() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

// intn returns a uniform random int in [0,n).
func (h *harness) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

// between returns a uniform random duration in [lo, hi).
func (h *harness) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(h.float()*float64(hi-lo))
}

func (h *harness) config(s *slot) node.Config {
	cfg := node.ConfigFromEnv(func(string) string { return "" })
	cfg.NodeID = s.id
	cfg.Profile = h.sc.Profile
	cfg.Partitions = h.sc.Partitions
	cfg.BootstrapExpect = min(h.sc.Nodes-h.sc.Diskless, 3)
	if s.i >= h.sc.Nodes-h.sc.Diskless {
		cfg.Voter, cfg.Diskless = node.VoterNever, true
	}
	cfg.GossipAddr, cfg.RaftAddr = s.gossip, s.raft
	for _, o := range h.slots {
		cfg.Seeds = append(cfg.Seeds, o.gossip)
	}
	cfg.Network = h.tr
	cfg.StateMachines = map[string]node.StateMachine{probeType: probeSM{}}
	if f := h.sc.App.StateMachines; f != nil {
		for typ, sm := range f(s.id) {
			cfg.StateMachines[typ] = sm
		}
	}
	return cfg
}

// sleep waits d of (virtual) time or until the run ends.
func (h *harness) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.ctx.Done():
		return false
	}
}

// sleepUntil sleeps until virtual time at since the start.
func (h *harness) sleepUntil(at time.Duration) bool {
	return h.sleep(at - h.rec.now())
}

func (h *harness) run(parent context.Context) (*Result, error) {
	h.rec = newRecorder(time.Now())
	h.tr.OnApply = h.rec.apply
	h.ctx, h.cancel = context.WithCancel(parent)
	defer h.cancel()

	// Bootstrap: the voters must see each other, so start every node at once.
	var wg sync.WaitGroup
	errs := make([]error, len(h.slots))
	for _, s := range h.slots {
		wg.Go(func() { errs[s.i] = h.startOnce(s, 30*time.Second) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		h.teardown()
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	settle, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	err := h.live()[0].WaitSettled(settle)
	cancel()
	if err != nil {
		h.teardown()
		return nil, fmt.Errorf("cluster did not settle: %w", err)
	}
	if err := h.setFenced(); err != nil {
		h.teardown()
		return nil, err
	}

	h.goBackground(h.enqueueLoop)
	h.goBackground(h.staleProbeLoop)
	faults := h.sc.Faults
	if len(faults) == 0 && h.sc.RandomFaults {
		faults = h.randomFaults(h.rec.now()+time.Second, h.sc.FaultsUntil)
	}
	h.runFaults(faults)
	h.heal()

	res := &Result{Scenario: h.sc, L1: h.waitL1()}
	h.sleepUntil(h.sc.Duration - 5*time.Second)
	h.finalChecks()
	h.teardown()
	h.rec.checkS4()

	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	res.Violations = slices.Clone(h.rec.violations)
	for _, t := range h.rec.terms {
		res.Terms = append(res.Terms, *t)
	}
	res.Faults = h.faults
	res.Applies, res.Acks, res.JobsCompleted = h.rec.applies, uint64(len(h.rec.acks)), h.rec.completed
	res.StaleProbes, res.StaleRejected = h.rec.stale.probes, h.rec.stale.rejected
	res.Trace = h.rec.trace
	res.Version = h.rec.version
	res.StreamMembers = h.streamMembers
	res.FencedOverlaps = slices.Clone(h.rec.fencedOverlaps)
	return res, nil
}

// setFenced commits Scenario.Fenced through the first node, as an
// operator would (tenure fenced --set), once the cluster runs a version
// that has fenced takeover, and waits until every node's replica has it.
func (h *harness) setFenced() error {
	if len(h.sc.Fenced) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	n := h.live()[0]
	for _, r := range h.sc.Fenced {
		for {
			err := n.SetFencedTakeover(ctx, r.First, r.Last, true)
			if err == nil {
				break
			}
			if ctx.Err() != nil || !(errors.Is(err, node.ErrVersionInactive) || errors.Is(err, node.ErrNoQuorum)) {
				return fmt.Errorf("fenced takeover for shards %d-%d: %w", r.First, r.Last, err)
			}
			h.sleep(100 * time.Millisecond)
		}
	}
	for _, m := range h.live() {
		for _, r := range h.sc.Fenced {
			for !m.Shard(r.First).Fenced || !m.Shard(r.Last).Fenced {
				if ctx.Err() != nil {
					return fmt.Errorf("%s never applied the fenced-takeover policy for shards %d-%d", m.ID(), r.First, r.Last)
				}
				h.sleep(50 * time.Millisecond)
			}
		}
	}
	return nil
}

func (h *harness) goBackground(f func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
}

// live returns the running nodes, in slot order.
func (h *harness) live() []*node.Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*node.Node
	for _, s := range h.slots {
		if s.n != nil {
			out = append(out, s.n)
		}
	}
	return out
}

// startOnce starts slot s's node and its workers.
func (h *harness) startOnce(s *slot, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	n, err := node.Start(ctx, h.config(s))
	if err != nil {
		return err
	}
	done := make(chan struct{})
	h.mu.Lock()
	s.n, s.workerDone = n, done
	h.mu.Unlock()
	env := &Env{Node: n, h: h}
	inc := n.Incarnation()
	go func() {
		defer close(done)
		_ = n.RunPerShard(h.ctx, func(ctx context.Context, tok node.Token) error {
			t := h.rec.begin(s.id, inc, tok)
			defer h.rec.end(t)
			if h.sc.App.Worker == nil {
				<-ctx.Done()
				return nil
			}
			return h.sc.App.Worker(ctx, env, tok)
		})
	}()
	return nil
}

// restart starts s again, retrying until it registers or the run ends.
func (h *harness) restart(s *slot) {
	for h.ctx.Err() == nil {
		if err := h.startOnce(s, 20*time.Second); err == nil {
			return
		}
		h.sleep(500 * time.Millisecond)
	}
}

// down takes s's process out of the slot and waits for its workers.
func (h *harness) down(s *slot, stop func(*node.Node)) {
	h.mu.Lock()
	n, done := s.n, s.workerDone
	s.n = nil
	h.mu.Unlock()
	if n == nil {
		return
	}
	stop(n)
	<-done
}

func (h *harness) crash(s *slot) { h.down(s, h.tr.Crash) }

func (h *harness) closeGracefully(s *slot) {
	h.down(s, func(n *node.Node) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
}

// waitL1 waits until every shard has exactly one acting owner among the
// live nodes, at most L1Bound after FaultsUntil; it returns how long that
// took after FaultsUntil, or -1 and records an L1 violation.
func (h *harness) waitL1() time.Duration {
	h.sleepUntil(h.sc.FaultsUntil)
	deadline := h.sc.FaultsUntil + h.sc.L1Bound
	var last string
	for {
		last = h.actingProblem()
		if last == "" {
			return max(h.rec.now()-h.sc.FaultsUntil, 0)
		}
		if h.rec.now() >= deadline || !h.sleep(100*time.Millisecond) {
			h.rec.Violate("L1", "%v after faults stopped: %s", h.sc.L1Bound, last)
			return -1
		}
	}
}

// actingProblem describes a shard without exactly one acting owner, "" if
// none.
func (h *harness) actingProblem() string {
	acting := make(map[uint32][]string)
	for _, n := range h.live() {
		for _, tok := range n.Owned() {
			acting[tok.Shard] = append(acting[tok.Shard], n.ID())
		}
	}
	for s := range uint32(h.sc.Partitions) {
		if len(acting[s]) != 1 {
			return fmt.Sprintf("shard %d acted on by %v", s, acting[s])
		}
	}
	return ""
}

// finalChecks waits for the live replicas to catch up, then checks that
// every acknowledged command is on them (S3) and runs App.Check.
func (h *harness) finalChecks() {
	// The workload keeps running: acknowledgements that arrive after this
	// point are not waited for, so they are not judged either.
	h.rec.mu.Lock()
	var want uint64
	h.rec.ackCutoff = len(h.rec.acks)
	for _, a := range h.rec.acks {
		want = max(want, a.index)
	}
	h.rec.mu.Unlock()
	nodes := h.live()
	for _, n := range nodes {
		for n.AppliedIndex() < want && h.rec.now() < h.sc.Duration {
			h.sleep(50 * time.Millisecond)
		}
	}
	live, applied := map[string]uint64{}, map[string]uint64{}
	for _, n := range nodes {
		live[n.ID()], applied[n.ID()] = n.Incarnation(), n.AppliedIndex()
		if st := n.Status().Stream; st.Following && st.Entries+st.Snapshots > 0 {
			h.streamMembers++
		}
	}
	h.rec.checkAcks(live, applied)
	if h.sc.App.Check != nil {
		if err := h.sc.App.Check(nodes); err != nil {
			h.rec.Violate("app", "%v", err)
		}
	}
}

// heal removes every partition, cut, delay and loss.
func (h *harness) heal() {
	h.tr.Gossip.Heal()
	h.tr.Gossip.SetDefaultLink(0, 0)
	h.tr.Raft.Heal()
	h.tr.Raft.SetDefaultLink(cluster.Link{})
}

// teardown crashes every node (fast, and what S4 must survive anyway) and
// waits for every goroutine the harness started.
func (h *harness) teardown() {
	for _, s := range h.slots {
		h.crash(s)
	}
	h.cancel()
	h.wg.Wait()
	// Let stragglers of the stopped components (a memberlist probe waiting
	// out its timeout) finish: a bubble ends only when all its goroutines
	// have, and time stands still once its main goroutine has returned.
	time.Sleep(10 * time.Second)
}
