package simulation

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// raftModel is the control group as a linearizable log: one leader at a
// time among the voters, commits after a delay, leader elections when the
// leader dies, pauses or loses its quorum, and proposals in flight at a
// leader change that are either lost or committed anyway — the proposer
// learns only "leadership lost" (unknown outcome) in both cases.
type raftModel struct {
	s       *Sim
	log     []entry
	ref     *ledger.FSM // reference replica, applied at commit time
	refApp  *counterApp
	refUser map[string]ledger.StateMachine
	// hist[i-histBase] is ref's published State after the first i entries
	// (Config.SharedReplicas): a shared node at applied index i reads it
	// instead of a replica of its own. Trimmed below the lowest applied
	// index of the running shared nodes.
	hist      []*ledger.State
	histBase  uint64
	leader    int // node index, -1 none
	term      uint64
	pending   []*proposal
	electing  bool
	elections int
}

type entry struct {
	cmd  ledger.Command
	from int
	// touched is what the entry touched, as the log's state shows it after
	// the entry (Config.SharedReplicas: every shared node observes it).
	touched *touched
}

// touched is the records an entry touched and whether it was about
// ownership or liveness.
type touched struct {
	nodes    []ledger.NodeRecord
	shards   []ledger.ShardRecord
	relevant bool
}

// touchedBy reads the records cmd touched from st.
func touchedBy(st *ledger.State, cmd ledger.Command) *touched {
	var t touched
	nodes, shards := ownership.Touched(cmd)
	for _, id := range nodes {
		if r, ok := st.Node(id); ok {
			t.nodes = append(t.nodes, r)
		}
	}
	for _, id := range shards {
		if r, ok := st.Shard(id); ok {
			t.shards = append(t.shards, r)
		}
	}
	t.relevant = len(nodes)+len(shards) > 0
	return &t
}

type proposal struct {
	cmd  ledger.Command
	from *node
	gen  uint64
	term uint64
	// cut: the leader had no quorum when the proposal reached it, so the
	// entry is on no other voter and a later leader cannot commit it.
	cut bool
	// replicated is when the entry reaches a follower's disk: until then
	// it is only in the leader's log, whose unsynced tail a crash or a
	// deposition loses (S3 is about what a majority holds).
	replicated int64
	// acked: the proposer was already told it committed, at index
	// ackedAt (only under the ack-before-commit mutation, before the
	// commit).
	acked   bool
	ackedAt uint64
	done    func(res ledger.Result, index uint64, err error)
}

func newRaft(s *Sim) *raftModel {
	f, app, user := s.newReplica()
	r := &raftModel{s: s, ref: f, refApp: app, refUser: user, leader: -1}
	if s.cfg.SharedReplicas {
		r.hist = []*ledger.State{f.State()}
	}
	return r
}

// link reports whether messages from a reach b.
func (r *raftModel) link(a, b int) bool { return a == b || r.s.gossip.cut[a][b] == 0 }

// reaches reports whether n receives entries from the leader.
func (r *raftModel) reaches(n *node) bool {
	return r.leader >= 0 && r.link(r.leader, n.idx)
}

// quorum reports whether voter v is up, running and connected both ways
// with a majority of the voters.
func (r *raftModel) quorum(v int) bool {
	n := r.s.nodes[v]
	if !n.voter || !r.s.running(n) {
		return false
	}
	votes, total := 0, 0
	for _, m := range r.s.nodes {
		if !m.voter {
			continue
		}
		total++
		if m.idx == v || (m.up && r.s.now >= m.pausedUntil && r.link(v, m.idx) && r.link(m.idx, v)) {
			votes++
		}
	}
	return votes*2 > total
}

// checkLeader starts an election (after an election timeout) when the
// leader is gone or has lost its quorum.
func (r *raftModel) checkLeader() {
	if r.electing || (r.leader >= 0 && r.quorum(r.leader)) {
		return
	}
	r.electing = true
	lo, hi := r.s.cfg.ElectionDelay[0], r.s.cfg.ElectionDelay[1]
	if hi == 0 {
		lo, hi = 300*time.Millisecond, 700*time.Millisecond
	}
	r.s.after(r.s.jitter(lo, hi), evElection, -1, r.elect)
}

func (r *raftModel) elect() {
	s := r.s
	r.electing = false
	if r.leader >= 0 && r.quorum(r.leader) {
		return
	}
	var cands []int
	for _, n := range s.nodes {
		if n.voter && r.quorum(n.idx) {
			cands = append(cands, n.idx)
		}
	}
	old := r.leader
	if old >= 0 {
		s.leaderStep(s.nodes[old], ownership.LeadershipChanged{Leading: false})
	}
	r.leader = -1
	r.term++
	// In-flight proposals of the old term: each is lost or committed anyway
	// by the next leader — except one the old leader received while cut
	// off from its quorum, which no other voter holds; their proposers only
	// learn "leadership lost".
	pend := r.pending
	r.pending = nil
	for _, p := range pend {
		// Lost when it never left the old leader's log (not yet on a
		// follower's disk, or received while cut off); otherwise a coin:
		// the next leader may or may not be one of the voters holding it.
		committed := s.chance(0.5) && len(cands) > 0 && !p.cut && s.now >= p.replicated
		if committed {
			r.commit(p.cmd, p.from.idx)
		} else if p.acked {
			s.violate("S3", "acknowledged #%d %s was lost: it was on no majority when %s lost the leadership",
				p.ackedAt, ownership.FormatCommand(p.cmd), s.nodes[max(old, 0)].id)
		}
		s.tracef("raft: in-flight %s from %s %s", ownership.FormatCommand(p.cmd), p.from.id, map[bool]string{true: "committed anyway", false: "lost"}[committed])
		if p.done != nil {
			done := p.done
			s.onNodeGen(p.from, p.gen, s.jitter(time.Millisecond, 50*time.Millisecond), evDeliver, func() {
				done(ledger.Result{}, 0, ownership.ErrLeadershipLost)
			})
		}
	}
	if len(cands) == 0 {
		r.checkLeader()
		return
	}
	r.leader = cands[s.rng.IntN(len(cands))]
	r.elections++
	s.tracef("raft: %s leads term %d", s.nodes[r.leader].id, r.term)
	for _, n := range s.nodes {
		if n.up {
			s.scheduleSync(n, s.jitter(time.Millisecond, 10*time.Millisecond))
		}
	}
	s.leaderStep(s.nodes[r.leader], ownership.LeadershipChanged{Leading: true})
}

// propose sends cmd from n to the leader; done (may be nil) receives the
// result on n, or ErrLeadershipLost when the outcome is unknown.
func (r *raftModel) propose(n *node, cmd ledger.Command, done func(ledger.Result, uint64, error)) {
	r.proposeAll(n, []ledger.Command{cmd}, done)
}

// proposeAll sends cmds from n to the leader together, as node.leaderLoop's
// BatchProposer does with a round's proposals: they commit at one instant,
// in the given order, each with its own result (a Batch entry's
// sub-commands). done (may be nil) receives each command's result on n,
// or ErrLeadershipLost. An election in between commits or loses each
// in-flight command on its own.
func (r *raftModel) proposeAll(n *node, cmds []ledger.Command, done func(ledger.Result, uint64, error)) {
	s := r.s
	fail := func(d time.Duration) {
		if done != nil {
			s.onNode(n, d, evDeliver, func() { done(ledger.Result{}, 0, ownership.ErrLeadershipLost) })
		}
	}
	if r.leader < 0 || !r.link(n.idx, r.leader) {
		for range cmds {
			fail(s.jitter(5*time.Millisecond, 100*time.Millisecond))
		}
		return
	}
	ps := make([]*proposal, len(cmds))
	cut := !r.quorum(r.leader)
	for i, cmd := range cmds {
		if s.chance(0.01) {
			// A duplicate of the proposal arrives much later (a client retry
			// after an unknown outcome, or a delayed network duplicate): it must
			// fail its compare-and-set.
			s.after(s.jitter(50*time.Millisecond, time.Second), evCommit, n.idx, func() {
				if r.leader >= 0 {
					r.commit(cmd, n.idx)
				}
			})
		}
		ps[i] = &proposal{cmd: cmd, from: n, gen: n.gen, term: r.term, cut: cut, done: done}
		r.pending = append(r.pending, ps[i])
	}
	// Network to the leader, replication to a quorum, fsync.
	d := s.jitter(500*time.Microsecond, 3*time.Millisecond)
	if s.chance(0.05) {
		d += s.jitter(5*time.Millisecond, 40*time.Millisecond) // slow fsync
	}
	for _, p := range ps {
		p.replicated = s.now + int64(d)/2
	}
	if mutation.On(mutation.AckBeforeCommit) && done != nil {
		// The broken rule: the leader answers once it appended the
		// entries, at the indexes they would get, before any follower
		// holds them.
		for i, p := range ps {
			p.acked, p.ackedAt = true, uint64(len(r.log)+len(r.pending)-len(ps)+i+1)
			s.onNodeGen(n, p.gen, 200*time.Microsecond, evDeliver, func() {
				s.check.ack(p.ackedAt, p.cmd)
				done(ledger.Result{}, p.ackedAt, nil)
			})
		}
	}
	var try func()
	try = func() {
		if ps[0].term != r.term {
			return // the election committed or lost them
		}
		if !r.quorum(r.leader) {
			// No quorum: it waits, until the leader regains its quorum or
			// an election resolves it.
			s.after(20*time.Millisecond, evCommit, n.idx, try)
			return
		}
		for _, p := range ps {
			for i, q := range r.pending {
				if q == p {
					r.pending = append(r.pending[:i], r.pending[i+1:]...)
					break
				}
			}
		}
		res := make([]ledger.Result, len(ps))
		index := make([]uint64, len(ps))
		for i, p := range ps {
			res[i], index[i] = r.commit(p.cmd, n.idx)
		}
		if done == nil {
			return
		}
		for i, p := range ps {
			if p.acked {
				continue // answered at append (ack-before-commit)
			}
			if !r.link(r.leader, n.idx) {
				fail(s.jitter(100*time.Millisecond, 300*time.Millisecond)) // response lost: timeout
				continue
			}
			back := s.jitter(200*time.Microsecond, 2*time.Millisecond)
			if s.chance(0.05) {
				back += s.jitter(10*time.Millisecond, 200*time.Millisecond) // slow response
			}
			s.onNodeGen(n, p.gen, back, evDeliver, func() {
				s.check.ack(index[i], p.cmd)
				done(res[i], index[i], nil)
			})
		}
	}
	s.after(d, evCommit, n.idx, try)
}

// commit appends cmd to the log and applies it to the reference replica,
// running the ledger checkers around it.
func (r *raftModel) commit(cmd ledger.Command, from int) (ledger.Result, uint64) {
	return r.commitChecked(cmd, from, false, nil)
}

// commitChecked is commit; a probe is checked to be rejected with want.
func (r *raftModel) commitChecked(cmd ledger.Command, from int, probe bool, want error) (ledger.Result, uint64) {
	s := r.s
	r.log = append(r.log, entry{cmd: cmd, from: from})
	index := uint64(len(r.log))
	s.res.Commits++
	res := r.ref.ApplyCommand(index, cmd)
	if c, ok := cmd.(ledger.Session); ok && !probe && (res.Err == nil || !errors.Is(res.Err, ledger.ErrInvalid) && !errors.Is(res.Err, ledger.ErrRequestIDReused)) {
		s.usedRequestID(c.ID)
	}
	if s.cfg.SharedReplicas {
		r.log[index-1].touched = touchedBy(r.ref.State(), cmd)
	}
	s.check.committed(index, from, cmd, res, probe, want)
	if _, ok := cmd.(ledger.ExpireNode); ok && res.Err == nil {
		s.res.ExpiriesCommitted++
	}
	line := ownership.FormatCommand(cmd)
	_, _ = s.hash.WriteString(line)
	if res.Err != nil {
		_, _ = s.hash.WriteString(" rejected")
	}
	if s.cfg.Trace != nil {
		verdict := "ok"
		if res.Err != nil {
			verdict = res.Err.Error()
		}
		s.tracef("commit #%d from %s: %s -> %s", index, s.nodes[from].id, line, verdict)
	}
	low := index
	for _, n := range s.nodes {
		if n.up && !n.syncing {
			s.scheduleSync(n, s.applyDelay())
		}
		if n.up && n.fsm == nil {
			low = min(low, n.applied)
		}
	}
	if s.cfg.SharedReplicas {
		r.record(low)
	}
	return res, index
}

// record appends ref's state after the newest entry to hist and trims the
// states below low (no running shared node needs them) once they are at
// least half of hist.
func (r *raftModel) record(low uint64) {
	r.hist = append(r.hist, r.ref.State())
	if drop := low - r.histBase; drop > 0 && 2*drop >= uint64(len(r.hist)) {
		r.hist = append([]*ledger.State(nil), r.hist[drop:]...)
		r.histBase = low
	}
}

// stateAt returns the log's state after the first i entries; i must not be
// below histBase (Config.SharedReplicas).
func (r *raftModel) stateAt(i uint64) *ledger.State { return r.hist[i-r.histBase] }

// replica returns n's replica's state: its own FSM's or, for a shared node
// (Config.SharedReplicas), the log's state at its applied index.
func (s *Sim) replica(n *node) *ledger.State {
	if n.fsm != nil {
		return n.fsm.State()
	}
	return s.raft.stateAt(n.applied)
}

func (s *Sim) applyDelay() time.Duration {
	if s.chance(0.02) {
		return s.jitter(10*time.Millisecond, 80*time.Millisecond)
	}
	return s.jitter(100*time.Microsecond, 3*time.Millisecond)
}

// onNodeGen is onNode for a specific process generation.
func (s *Sim) onNodeGen(n *node, gen uint64, d time.Duration, kind uint8, fn func()) {
	if n.gen != gen {
		return
	}
	s.onNode(n, d, kind, fn)
}

func (r *raftModel) String() string {
	return fmt.Sprintf("raft term %d leader %d log %d", r.term, r.leader, len(r.log))
}
