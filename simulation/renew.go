package simulation

import (
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// Lease renewals off the log (cluster version 4, docs/protocol.md). A node's
// renewal is a message to the control-group leader, dropped on a cut link
// or when there is none. On delivery the leader's real planner judges it
// (ownership.Leader.Renew, as node/ through its leaderLoop); an accepted renewal waits
// for the leader's next confirm round. A round asks every voter; a voter
// that receives the Confirm first records the time (its clock) and then
// answers yes iff the sender still leads the same term. The outcome is
// decided at one random instant inside the round — success iff the sender
// then still leads the round's term with a quorum of running voters linked
// both ways — and the replies travel back afterwards, possibly after a
// later election: a deposed leader's acks arrive late, but only for
// renewals it received before its last successful round, which every later
// leader's bound covers (confirmBound, ownership.EstablishBound).

// renewReq is a renewal the leader accepted and has not answered yet.
type renewReq struct {
	asker
	ask ownership.RenewAsk
	// index is the leader's last log index read after receipt; rec its
	// record of the node.
	index uint64
	rec   ledger.NodeRecord
}

// renew sends the renewal the agent of n asked for to the leader.
func (s *Sim) renew(n *node, ask ownership.RenewAsk) {
	r := s.raft
	req := &renewReq{asker: askerOf(n), ask: ask}
	s.tracef("%s renews (token %d, liveness %d) with leader %d", n.id, ask.Token, ask.Liveness, r.leader)
	if r.leader < 0 || !r.link(n.idx, r.leader) {
		s.renewAnswer(req, s.jitter(5*time.Millisecond, 100*time.Millisecond), ownership.RenewOutcome{Token: ask.Token, Err: ownership.ErrNotLeader})
		return
	}
	l := s.nodes[r.leader]
	if !l.up {
		// A dead leader's port refuses the connection.
		s.renewAnswer(req, s.jitter(time.Millisecond, 5*time.Millisecond), ownership.RenewOutcome{Token: ask.Token, Err: ownership.ErrNotLeader})
		return
	}
	// A renewal to a process that dies or is paused on the way is lost or
	// waits; the node's request times out after RenewEvery (its clock),
	// so lost renewals do not hold the in-flight slots until the agent
	// stops counting them (a Lease).
	s.onNode(l, s.jitter(100*time.Microsecond, time.Millisecond), evRenew, func() { s.receiveRenew(l, req) })
	s.renewAnswer(req, n.trueAfter(s.cfg.Ownership.RenewEvery), ownership.RenewOutcome{Token: ask.Token, Err: ownership.ErrLeadershipLost})
	s.pauseInFlight(n)
}

// receiveRenew is the leader l receiving req.
func (s *Sim) receiveRenew(l *node, req *renewReq) {
	r := s.raft
	if r.leader != l.idx || l.lead == nil || !l.lead.Established() {
		s.renewReply(l, req, ownership.RenewOutcome{Token: req.ask.Token, Err: ownership.ErrNotLeader})
		return
	}
	rec, _ := s.replica(l).Node(req.ask.Node)
	if err := l.lead.Renew(l.localTime(s.now), rec, req.ask.Incarnation, req.ask.Liveness); err != nil {
		s.tracef("%s refuses %s's renewal: %v", l.id, req.from.id, err)
		s.renewReply(l, req, ownership.RenewOutcome{Token: req.ask.Token, Record: rec, Err: err})
		return
	}
	// The leader's last log index after receipt: every entry committed
	// before the renewal arrived is at or below it.
	req.index, req.rec = uint64(len(r.log)), rec
	if mutation.On(mutation.RenewWithoutConfirm) {
		s.renewReply(l, req, ownership.RenewOutcome{Token: req.ask.Token, CommitIndex: req.index, Record: rec})
		return
	}
	l.renewQueue = append(l.renewQueue, req)
	if !l.confirming {
		s.confirmRound(l)
	}
}

// confirmRound runs one confirm round on the leader l for every renewal
// queued; renewals that arrive meanwhile wait for the next round.
func (s *Sim) confirmRound(l *node) {
	r := s.raft
	batch := l.renewQueue
	l.renewQueue, l.confirming = nil, true
	term := r.term
	dur := s.jitter(300*time.Microsecond, 3*time.Millisecond)
	if s.chance(0.05) {
		dur += s.jitter(5*time.Millisecond, 60*time.Millisecond) // a slow voter
	}
	tc := s.jitter(0, dur)
	s.onNode(l, tc, evConfirm, func() {
		votes, total := 0, 0
		for _, v := range s.nodes {
			if !v.voter {
				continue
			}
			total++
			if !s.running(v) || !(r.link(l.idx, v.idx) && r.link(v.idx, l.idx)) {
				continue
			}
			// The voter records first, then answers.
			v.confirms[term] = v.local(s.now)
			votes++
		}
		ok := r.leader == l.idx && r.term == term && votes*2 > total
		s.tracef("%s confirm round term %d: %d/%d voters, ok=%v, %d renewals", l.id, term, votes, total, ok, len(batch))
		if ok {
			s.res.ConfirmRounds++
		}
		s.onNode(l, dur-tc, evConfirm, func() {
			l.confirming = false
			for _, req := range batch {
				out := ownership.RenewOutcome{Token: req.ask.Token, Err: ownership.ErrNotLeader}
				if ok {
					out = ownership.RenewOutcome{Token: req.ask.Token, CommitIndex: req.index, Record: req.rec}
				}
				s.renewReply(l, req, out)
			}
			if len(l.renewQueue) > 0 {
				s.confirmRound(l)
			}
		})
	})
}

// renewReply sends the leader l's answer to req back to the node.
func (s *Sim) renewReply(l *node, req *renewReq, out ownership.RenewOutcome) {
	if !s.raft.link(l.idx, req.from.idx) {
		// Lost: the node's request times out.
		s.renewAnswer(req, s.jitter(100*time.Millisecond, 300*time.Millisecond), ownership.RenewOutcome{Token: req.ask.Token, Err: ownership.ErrLeadershipLost})
		return
	}
	back := s.jitter(100*time.Microsecond, time.Millisecond)
	if s.chance(0.05) {
		back += s.jitter(10*time.Millisecond, 200*time.Millisecond) // a slow response
	}
	if out.Err == nil {
		s.res.Renewals++ // acked by the leader (the node may have given up)
	}
	s.renewAnswer(req, back, out)
}

// renewAnswer delivers out to req's process after d.
func (s *Sim) renewAnswer(req *renewReq, d time.Duration, out ownership.RenewOutcome) {
	s.answer(&req.asker, d, evDeliver, out)
}

// asker is the asking side of a request an agent makes of the leader (a
// renewal, a word): its process, the agent that asked, and whether it has
// its answer.
type asker struct {
	from  *node
	gen   uint64
	agent *ownership.Agent
	// answered: the node got its answer or gave up waiting (the first of
	// the two counts).
	answered bool
}

func askerOf(n *node) asker { return asker{from: n, gen: n.gen, agent: n.agent} }

// answer delivers out to a's process after d (an event of kind ev): once,
// and only to the agent that asked (not to a restarted one).
func (s *Sim) answer(a *asker, d time.Duration, ev uint8, out ownership.AgentInput) {
	n := a.from
	s.onNodeGen(n, a.gen, d, ev, func() {
		if n.agent != a.agent || a.answered {
			return
		}
		a.answered = true
		s.step(n, out)
	})
}

// confirmBound is the voters' bound a new leader n asks for
// (ownership.LeaderReady.AskBound), computed as cluster/'s EstablishBound
// does with ConfirmAge: every voter that answers (running, linked both
// ways) reports how long ago by its clock it last received a Confirm of an
// earlier term (or its process start, if later: an earlier process of it
// may have confirmed just before it died); the bound is the latest of the
// answers' receipt − age, with a quorum of answers, else now
// (ownership.VotersBound, as cluster/ decides it). The leader
// core clamps it (ownership.EstablishBound).
func (s *Sim) confirmBound(n *node) time.Time {
	now := n.local(s.now)
	r := s.raft
	var seen []time.Time
	voters := 0
	for _, v := range s.nodes {
		if !v.voter {
			continue
		}
		voters++
		if !s.running(v) || !(r.link(n.idx, v.idx) && r.link(v.idx, n.idx)) {
			continue
		}
		last := v.confirmFloor
		for term, at := range v.confirms {
			if term < r.term && at > last {
				last = at
			}
		}
		seen = append(seen, time.Unix(0, now-(v.local(s.now)-last)))
	}
	return ownership.VotersBound(time.Unix(0, now), seen, voters)
}

// upgrade restarts every node in turn with a binary that speaks
// ledger.MaxClusterVersion (Config.UpgradeAt).
func (s *Sim) upgrade() {
	for i, n := range s.nodes {
		s.after(time.Duration(i)*700*time.Millisecond, evFault, n.idx, func() {
			s.tracef("upgrade %s", n.id)
			n.binMax = ledger.MaxClusterVersion
			if !n.up {
				return // it starts with the new binary
			}
			s.crash(n)
			gen := n.gen
			s.after(200*time.Millisecond, evFault, n.idx, func() {
				if !n.up && n.gen == gen {
					s.start(n, false)
				}
			})
		})
	}
}
