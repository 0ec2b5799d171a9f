package simulation

import (
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// node is one simulated process slot: a stable node id whose process can
// crash and restart (a new generation, usually a new incarnation).
type node struct {
	idx   int
	id    string
	voter bool

	up          bool
	gen         uint64 // process generation; events of older ones are dropped
	pausedUntil int64
	inc         uint64

	// Clock: local monotonic = mono0 + rate·(t − true0); wall = local + wallOffset.
	mono0, true0 int64
	rate         float64
	wallOffset   int64

	health   float64
	draining bool

	// agent is the node-side protocol: the very ownership.Agent node/
	// runs, driven by this shell (step).
	agent   *ownership.Agent
	fsm     *ledger.FSM
	app     *counterApp
	user    map[string]ledger.StateMachine
	applied uint64 // highest log index applied by the replica
	syncing bool   // a sync event is scheduled

	// lead is a voter process's leader core: the very ownership.Leader
	// node/ runs, driven by this shell (leader.go). barrier: it asked for
	// a Barrier, done once the replica applied the whole log.
	lead     *ownership.Leader
	barrier  bool
	outcomes *outcomes // a round's outcomes waiting for the replica
	roundAt  int64     // time of the next scheduled round (0: none)

	// Lease renewals (cluster version 4, renew.go). binMax is the newest
	// cluster version the node's binary speaks. v4At is the local time
	// this process's replica first showed version 4 active (0: not yet).
	// As a voter: confirms is the local time it last received a Confirm
	// of each term, confirmFloor its process start (it may have confirmed
	// just before an earlier process died). As the leader: renewals
	// waiting for the next confirm round, and whether one is in flight.
	binMax       uint32
	v4At         int64
	confirms     map[uint64]int64
	confirmFloor int64
	renewQueue   []*renewReq
	confirming   bool
	// Words (cluster version 6, words.go), as the leader: the ask each
	// node has waiting, and the Transfers received for each target that
	// no ask has carried yet.
	wordAsks  map[string]*wordAsk
	wordQueue map[string][]ledger.Transfer

	acting    map[uint32]uint64 // acting set as last computed (shard -> epoch)
	wakeAt    int64
	slowTill  int64 // replica applies slowly until then (slow disk)
	pauseNext time.Duration
	// duringRevoke is an armed DuringRevoke fault (faults.go).
	duringRevoke *Fault

	// workload
	jobSeq   uint64
	inflight map[string]int64 // job op key -> true time proposed
	drainAt  map[uint32]int64 // Revoking shard -> true time its workers finish (-1: stuck)
}

// local returns the node's monotonic clock at true time t.
func (n *node) local(t int64) int64 { return n.mono0 + int64(float64(t-n.true0)*n.rate) }

func (n *node) localTime(t int64) time.Time { return time.Unix(0, n.local(t)) }

// trueAfter converts a local duration into true time.
func (n *node) trueAfter(d time.Duration) time.Duration {
	return time.Duration(float64(d)/n.rate) + 1
}

func (n *node) setRate(t int64, rate float64) {
	n.mono0, n.true0, n.rate = n.local(t), t, rate
}

func (s *Sim) addNode(voter bool) error {
	i := len(s.nodes)
	n := &node{idx: i, id: fmt.Sprintf("n%d", i+1), voter: voter, health: 1}
	n.rate = 1 + (s.rng.Float64()*2-1)*s.cfg.ClockRateError
	if s.cfg.Stress {
		// Stress: every clock at the edge of the bound, fast or slow.
		n.rate = 1 + float64(1-2*s.rng.IntN(2))*s.cfg.ClockRateError
	}
	if i < len(s.cfg.ClockRates) {
		n.rate = s.cfg.ClockRates[i]
	}
	n.mono0 = s.rng.Int64N(int64(time.Hour))
	n.binMax = s.cfg.ClusterVersion
	if s.cfg.UpgradeAt > 0 {
		n.binMax = min(n.binMax, ledger.VersionLeaseRenewals-1)
	}
	n.wallOffset = s.rng.Int64N(int64(200*time.Millisecond)) - int64(100*time.Millisecond)
	s.nodes = append(s.nodes, n)
	if voter {
		if _, err := ownership.NewPlanner(s.cfg.Ownership); err != nil {
			return err
		}
	}
	return nil
}

// onNode schedules fn for n's current process after d (true time). The
// event is dropped if the process died meanwhile and deferred while it is
// paused.
func (s *Sim) onNode(n *node, d time.Duration, kind uint8, fn func()) {
	gen := n.gen
	var run func()
	run = func() {
		if !n.up || n.gen != gen {
			return
		}
		if s.now < n.pausedUntil {
			s.at(n.pausedUntil, kind, n.idx, run)
			return
		}
		fn()
	}
	s.after(d, kind, n.idx, run)
}

func (s *Sim) running(n *node) bool { return n.up && s.now >= n.pausedUntil }

// start starts a process on n: a fresh tracker and an empty replica that
// catches up from the log (raft replays it on restart).
func (s *Sim) start(n *node, sameIncarnation bool) {
	n.up = true
	n.gen++
	if !sameIncarnation {
		n.inc++
	}
	n.pausedUntil = 0
	oc := s.cfg.Ownership
	oc.MaxVersion = n.binMax
	ag, err := ownership.NewAgent(oc, n.id, n.inc)
	if err != nil {
		panic(err) // config validated in New
	}
	n.agent = ag
	if s.cfg.SharedReplicas && s.raft.histBase == 0 {
		// The log's states from the first entry on are still kept: read
		// them instead of applying every entry again.
		n.fsm, n.app, n.user = nil, nil, nil
	} else {
		n.fsm, n.app, n.user = s.newReplica()
	}
	n.applied = 0
	n.syncing = false
	n.lead, n.barrier, n.outcomes = nil, false, nil
	if n.voter {
		n.lead = newLeader(s.cfg.Ownership)
	}
	n.acting = map[uint32]uint64{}
	n.inflight = map[string]int64{}
	n.drainAt = map[uint32]int64{}
	n.wakeAt = 0
	n.roundAt = 0
	n.v4At = 0
	n.confirms = map[uint64]int64{}
	n.wordAsks, n.wordQueue = map[string]*wordAsk{}, map[string][]ledger.Transfer{}
	n.confirmFloor = n.local(s.now)
	n.renewQueue, n.confirming = nil, false
	s.tracef("%s start inc=%d gen=%d", n.id, n.inc, n.gen)
	s.scheduleSync(n, s.jitter(time.Millisecond, 5*time.Millisecond))
	if s.raft.leader == n.idx {
		// Restarted before the model held an election: it leads again.
		s.leaderStep(n, ownership.LeadershipChanged{Leading: true})
	}
	// The agent's first step soon: it asks for the first heartbeat, then
	// wakes itself every RenewEvery of the node's clock.
	s.onNode(n, s.jitter(0, 20*time.Millisecond), evHeartbeat, func() {
		if n.draining {
			s.step(n, ownership.DrainWish{Draining: true})
			return
		}
		s.step(n, ownership.Tick{})
	})
	if s.cfg.Workload || len(s.cfg.Workers) > 0 {
		s.onNode(n, s.jitter(50*time.Millisecond, 150*time.Millisecond), evWork, func() { s.work(n) })
	}
	s.gossip.changed(n)
	s.raft.checkLeader()
}

// crash kills n's process.
func (s *Sim) crash(n *node) {
	if !n.up {
		return
	}
	s.tracef("%s crash", n.id)
	crashed := make([]uint32, 0, len(n.acting))
	for sh := range n.acting {
		crashed = append(crashed, sh)
	}
	slices.Sort(crashed)
	for _, sh := range crashed {
		s.check.stoppedActing(n, sh, n.acting[sh])
		s.timeline(sh, "%s stops e%d (crash)", n.id, n.acting[sh])
	}
	n.up = false
	n.gen++
	n.agent = nil
	n.fsm, n.app, n.user = nil, nil, nil
	n.acting = map[uint32]uint64{}
	n.lead, n.barrier, n.outcomes = nil, false, nil
	s.gossip.changed(n)
	s.raft.checkLeader()
}

func (s *Sim) newReplica() (*ledger.FSM, *counterApp, map[string]ledger.StateMachine) {
	f, err := ledger.NewFSM(ledgerConfig())
	if err != nil {
		panic(err)
	}
	app := newCounterApp()
	if err := f.RegisterStateMachine(appType, app); err != nil {
		panic(err)
	}
	user := map[string]ledger.StateMachine{}
	for _, typ := range sortedTypes(s.cfg.StateMachines) {
		sm := s.cfg.StateMachines[typ]()
		if err := f.RegisterStateMachine(typ, sm); err != nil {
			panic(err) // validated in Config.Validate
		}
		user[typ] = sm
	}
	return f, app, user
}

func sortedTypes(m map[string]func() ledger.StateMachine) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// step feeds one input to n's agent and carries out its Ready, as
// node/real.go does: acting changes (checked for S4), the heartbeat, the
// proposals, and a wake-up at the local time the agent asks for.
func (s *Sim) step(n *node, in ownership.AgentInput) {
	if n.agent == nil {
		return
	}
	local := n.localTime(s.now)
	rd := n.agent.Step(local, in)
	s.actingChanged(n, rd.Changes)
	if rd.Heartbeat != nil {
		s.heartbeat(n, *rd.Heartbeat)
	}
	if rd.Renew != nil {
		s.renew(n, *rd.Renew)
	}
	for _, c := range rd.Proposals {
		switch c := c.(type) {
		case ledger.Release:
			s.res.Handoffs++
		case ledger.Transfer:
			s.res.Handoffs++
			s.sendWord(n, c)
			if p := s.cfg.LoseTransfers; p > 0 && s.chance(p) {
				// The leader (having relayed the word, at version 6)
				// lost the Transfer: it died or lost its leadership
				// before the commit. The old owner offers it again
				// after RenewEvery, unless it dies first.
				continue
			}
		}
		s.raft.propose(n, c, nil)
	}
	if rd.WordAsk != nil {
		s.askWords(n, *rd.WordAsk)
	}
	if d := rd.WakeAt; !d.IsZero() {
		at := s.now + int64(n.trueAfter(time.Duration(d.UnixNano()-local.UnixNano())))
		if n.wakeAt == 0 || at < n.wakeAt || n.wakeAt < s.now {
			n.wakeAt = at
			s.onNode(n, time.Duration(at-s.now), evWake, func() {
				if n.wakeAt == at {
					n.wakeAt = 0
				}
				s.step(n, ownership.Tick{})
			})
		}
	}
}

// heartbeat proposes the lease renewal the agent asked for and reports
// its outcome back.
func (s *Sim) heartbeat(n *node, ask ownership.HeartbeatAsk) {
	ag := n.agent
	s.raft.propose(n, ask.Command, func(res ledger.Result, index uint64, err error) {
		if ag != n.agent {
			return
		}
		s.step(n, ownership.HeartbeatOutcome{Token: ask.Token, Index: index, Result: res, Err: err})
	})
	s.pauseInFlight(n)
}

// pauseInFlight carries out a PauseInFlight fault right after n sent a
// heartbeat or a renewal.
func (s *Sim) pauseInFlight(n *node) {
	if n.pauseNext > 0 {
		n.pausedUntil = max(n.pausedUntil, s.now+int64(n.pauseNext))
		n.pauseNext = 0
		s.tracef("%s pauses right after its heartbeat until %v", n.id, time.Duration(n.pausedUntil))
		s.raft.checkLeader()
		s.gossip.changed(n)
		end := n.pausedUntil
		s.at(end, evFault, n.idx, func() {
			s.raft.checkLeader()
			s.gossip.changed(n)
			s.scheduleSync(n, time.Millisecond)
		})
	}
}

// scheduleSync makes n's replica catch up with the log after d.
func (s *Sim) scheduleSync(n *node, d time.Duration) {
	if n.syncing || !n.up {
		return
	}
	n.syncing = true
	gen := n.gen
	s.after(d, evApply, n.idx, func() {
		if n.gen != gen || !n.up {
			return
		}
		n.syncing = false
		s.sync(n)
	})
}

// sync applies committed entries to n's replica, a few at a time, feeding
// the tracker after every entry (a real node can start or stop acting
// between any two entries).
func (s *Sim) sync(n *node) {
	if !s.running(n) {
		s.scheduleSync(n, time.Duration(max(n.pausedUntil-s.now, 0))+time.Millisecond)
		return
	}
	if !s.raft.reaches(n) {
		return // healed links or a new leader schedule another sync
	}
	if s.now < n.slowTill {
		s.scheduleSync(n, time.Duration(n.slowTill-s.now))
		return
	}
	budget := 1 + s.rng.IntN(16)
	for n.applied < uint64(len(s.raft.log)) && budget > 0 {
		budget--
		n.applied++
		e := s.raft.log[n.applied-1]
		if n.fsm != nil {
			n.fsm.ApplyCommand(n.applied, e.cmd)
		}
		relevant := s.observe(n, e)
		s.deliverOutcomes(n)
		if relevant && n.lead != nil && n.lead.Established() && s.raft.leader == n.idx {
			// The leader loop re-plans when the table changed (coalesced).
			s.kickRound(n, 10*time.Millisecond)
		}
		if !n.up || s.stop {
			return
		}
	}
	if n.applied < uint64(len(s.raft.log)) {
		s.scheduleSync(n, s.jitter(100*time.Microsecond, 3*time.Millisecond))
		return
	}
	if n.lead != nil && n.barrier && s.raft.leader == n.idx {
		// The Barrier: the replica applied every entry of the log.
		n.barrier = false
		s.barriered(n)
	}
}

// observe feeds the records entry e touched to the agent (every entry:
// the agent learns the applied index) and reports whether the entry was
// about ownership or liveness. A shared node (Config.SharedReplicas) takes
// them as read from the log's state at commit.
func (s *Sim) observe(n *node, e entry) bool {
	t := e.touched
	if n.fsm != nil || t == nil {
		t = touchedBy(s.replica(n), e.cmd)
	}
	v := s.replica(n).ActiveVersion()
	if v >= ledger.VersionLeaseRenewals && n.v4At == 0 {
		n.v4At = n.local(s.now)
	}
	s.step(n, ownership.Observed{Applied: n.applied, Nodes: t.nodes, Shards: t.shards, Version: v})
	return t.relevant
}

// actingChanged follows the agent's acting-set transitions, checking S4
// for every shard the node starts acting on.
func (s *Sim) actingChanged(n *node, changes []ownership.Change) {
	if len(changes) == 0 {
		return
	}
	st := s.replica(n)
	for _, c := range changes {
		e, acting := n.acting[c.Shard]
		switch {
		case !c.Acting && acting && e == c.Epoch:
			delete(n.acting, c.Shard)
			s.check.stoppedActing(n, c.Shard, e)
			s.timeline(c.Shard, "%s stops e%d", n.id, e)
			if s.cfg.Workload && s.chance(0.3) {
				// A worker that has not noticed its cancellation yet sends
				// one more command under its old epoch: fencing (S2) must
				// reject it once the shard moved on.
				s.raft.propose(n, ledger.App{Shard: c.Shard, Epoch: e, Type: appType, Payload: []byte{2}, Now: s.wall(n)}, nil)
			}
		case c.Acting && (!acting || e != c.Epoch):
			rec, _ := st.Shard(c.Shard)
			rec.Epoch = c.Epoch
			n.acting[c.Shard] = c.Epoch
			s.check.startedActing(n, c.Shard, rec)
			if n.agent.OnWord(n.localTime(s.now), c.Shard) {
				s.res.WordStarts++
				s.check.actedOnWord(n, c.Shard, c.Epoch)
				s.timeline(c.Shard, "%s acts e%d on the word", n.id, c.Epoch)
				continue
			}
			s.timeline(c.Shard, "%s acts e%d", n.id, c.Epoch)
		}
	}
}

func (s *Sim) timeline(shard uint32, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.tracef("s%d: %s", shard, line)
	if slices.Contains(s.cfg.Watch, shard) {
		s.res.Timeline = append(s.res.Timeline, fmt.Sprintf("%v s%d %s", time.Duration(s.now).Round(time.Millisecond), shard, line))
	}
}

// agentActing reports whether n's process acts on shard at true time t.
func (n *node) agentActing(shard uint32, t int64) (ownership.Acting, bool) {
	if n.agent == nil {
		return ownership.Acting{}, false
	}
	return n.agent.Acting(n.localTime(t), shard)
}
