package simulation

import (
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// The leader shell: each voter process runs the very ownership.Leader core
// node/ runs (through node.leaderLoop), and this file carries out its
// LeaderReady over the modelled control group, as node.leaderLoop does over
// hashicorp/raft. No leader decision lives here: when to establish, the
// bound's clamp, when a round runs, what an unknown outcome means and when
// the next round is due are the core's.

// roundEvery is the period of the leader's timer-driven rounds (its
// clock): shorter than the product's (RenewEvery), so that scripts see
// decisions promptly.
const roundEvery = 100 * time.Millisecond

// newLeader returns a voter process's leader core (cfg was validated).
func newLeader(cfg ownership.Config) *ownership.Leader {
	p, err := ownership.NewPlanner(cfg)
	if err != nil {
		panic(err) // config validated in New
	}
	return ownership.NewLeader(p, roundEvery)
}

// leaderStep feeds one event to n's leader core at n's clock and carries
// out its Ready.
func (s *Sim) leaderStep(n *node, ev ownership.LeaderInput) {
	if n.lead == nil {
		return
	}
	if lc, ok := ev.(ownership.LeadershipChanged); ok && !lc.Leading {
		n.barrier = false
	}
	s.leaderReady(n, n.lead.Step(n.localTime(s.now), ev))
}

// plannerInput is the planner's input on n: its replica's table and its
// gossip view (ownership.InputOf, as node/ builds it).
func (s *Sim) plannerInput(n *node) ownership.Input {
	return ownership.InputOf(s.replica(n), s.gossip.members(n))
}

// barriered is n's Barrier returning: its replica applied the whole log.
func (s *Sim) barriered(n *node) {
	ev := ownership.Barriered{In: s.plannerInput(n)}
	if n.v4At != 0 {
		ev.RenewalsSince = time.Unix(0, n.v4At)
	}
	s.leaderStep(n, ev)
}

// leaderReady carries out rd on n.
func (s *Sim) leaderReady(n *node, rd ownership.LeaderReady) {
	if rd.PlanErr != nil {
		s.tracef("%s planner: %v", n.id, rd.PlanErr)
	}
	if rd.Established {
		s.tracef("%s establishes leadership (applied %d, bound %v before now)", n.id, n.applied, n.localTime(s.now).Sub(rd.Bound))
	}
	if rd.Lost {
		s.tracef("%s: a proposal's outcome is unknown; establishing again", n.id)
	}
	switch {
	case rd.Barrier:
		n.barrier = true
		if !n.syncing {
			s.scheduleSync(n, time.Millisecond)
		}
	case rd.AskBound:
		s.leaderStep(n, ownership.BoundFound{Confirm: s.confirmBound(n)})
		return
	case len(rd.Proposals) > 0:
		s.proposeRound(n, rd.Round, rd.Proposals)
	}
	if rd.RoundNow {
		s.kickRound(n, s.jitter(0, 2*time.Millisecond))
	}
	if !rd.WakeAt.IsZero() {
		s.kickRound(n, n.trueAfter(max(rd.WakeAt.Sub(n.localTime(s.now)), 0)))
	}
}

// proposeRound commits round's proposals together and in order, as the
// node.leaderLoop's batchProposer (a round's expiries commit before the grants
// they make possible), and Steps their outcomes once all returned.
func (s *Sim) proposeRound(n *node, round uint64, cmds []ledger.Command) {
	for _, c := range cmds {
		s.tracef("%s proposes %s", n.id, ownership.FormatCommand(c))
		s.revokeProposed(n, c)
		switch c := c.(type) {
		case ledger.ExpireNode:
			s.res.Expiries++
		case ledger.Grant:
			if c.Takeover {
				s.res.Takeovers++
			}
		}
	}
	lead := n.lead
	out := &outcomes{ev: ownership.Proposed{Round: round, Errs: make([]error, 0, len(cmds))}}
	s.raft.proposeAll(n, cmds, func(res ledger.Result, index uint64, err error) {
		if err == nil {
			err = res.Err
		}
		out.ev.Errs = append(out.ev.Errs, err)
		out.index = max(out.index, index)
		if len(out.ev.Errs) < len(cmds) || n.lead != lead {
			return
		}
		// As raft's Apply future, the outcomes return once the leader's
		// own replica applied them (sync delivers them otherwise).
		n.outcomes = out
		s.deliverOutcomes(n)
	})
}

// outcomes are a round's outcomes waiting for the leader's replica to
// apply index.
type outcomes struct {
	ev    ownership.Proposed
	index uint64
}

// deliverOutcomes Steps n's waiting outcomes once its replica applied
// them.
func (s *Sim) deliverOutcomes(n *node) {
	if o := n.outcomes; o != nil && n.applied >= o.index {
		n.outcomes = nil
		s.leaderStep(n, o.ev)
	}
}

// kickRound schedules a RoundDue for the leader n soon (coalesced).
func (s *Sim) kickRound(n *node, d time.Duration) {
	at := s.now + int64(d)
	if n.roundAt != 0 && n.roundAt >= s.now && n.roundAt <= at {
		return
	}
	n.roundAt = at
	s.onNode(n, d, evRound, func() {
		if n.roundAt == at {
			n.roundAt = 0
		}
		s.round(n)
	})
}

// round is a RoundDue on n: a notification or the wake-up its core asked
// for.
func (s *Sim) round(n *node) {
	if s.raft.leader != n.idx || n.lead == nil {
		return
	}
	var in ownership.Input
	if n.lead.WantsInput() {
		in = s.plannerInput(n)
	}
	s.leaderStep(n, ownership.RoundDue{In: in})
}
