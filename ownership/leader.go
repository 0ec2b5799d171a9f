package ownership

import (
	"errors"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
)

// Leader is the leader-side core: every decision the control group's
// leader makes about running the Planner — when a term is established (a
// Barrier first, then the bound), what that bound is, when a round runs,
// what a round's outcomes mean (an unknown outcome ends the term) and when
// the next round is due. It is the counterpart of Agent: a pure state
// machine, not safe for concurrent use, with no goroutines, clocks or I/O.
// Time enters as the now of every Step, events as LeaderInputs, and what
// the shell must do leaves as a LeaderReady.
//
// Two shells drive it: node's leader loop (node/leaderloop.go, a goroutine
// over hashicorp/raft) and the simulator (simulation/, over its modelled
// control group). Both carry out a LeaderReady the same way:
//
//   - Barrier: wait until this replica applied everything committed
//     before the term (raft.Barrier), read the planner's input, then Step
//     Barriered with it. A failed barrier is Stepped too (Err set); the
//     core asks again at its next wake-up.
//   - AskBound: ask the voters for their confirm records
//     (cluster.ControlGroup.EstablishBound) and Step BoundFound.
//   - Proposals: commit them together and in order (one Batch), then Step
//     Proposed with each one's outcome and the round's id.
//   - RoundNow: Step RoundDue at once (the table changed).
//   - WakeAt: Step RoundDue at that time (leader's clock) unless something
//     else comes first. Notifications (membership or ledger changes) are
//     RoundDue too: the core coalesces them.
type Leader struct {
	planner  *Planner
	interval time.Duration

	leading     bool // the control group says this node leads
	established bool // Establish ran for this term
	barrier     bool // a Barrier (or its bound) is outstanding
	// pending holds the input and clock of a Barriered event while the
	// bound is asked (AskBound).
	pendingIn  Input
	pendingNow time.Time
	pendingV4  time.Time

	round     uint64    // id of the last round
	inflight  bool      // the last round's proposals have not returned
	roundAt   time.Time // now of the last round
	kickedNow bool      // a RoundDue arrived while proposals were out

	stats LoopStats
}

// NewLeader returns a follower core around planner (which nobody else may
// use). interval is the period of timer-driven rounds (0: the planner's
// RenewEvery).
func NewLeader(planner *Planner, interval time.Duration) *Leader {
	if interval <= 0 {
		interval = planner.cfg.RenewEvery
	}
	return &Leader{planner: planner, interval: interval}
}

// LeaderInput is one event for Leader.Step: LeadershipChanged, Barriered,
// BoundFound, RoundDue or Proposed.
type LeaderInput interface{ leaderInput() }

// LeadershipChanged: the control group made this node its leader
// (Leading) or deposed it.
type LeadershipChanged struct{ Leading bool }

// Barriered: the Barrier a LeaderReady asked for returned. On success In
// is the planner's input read after it (and before now), and RenewalsSince
// the local time this process first saw ledger.VersionLeaseRenewals active
// in its replica (zero: not yet).
type Barriered struct {
	Err           error
	In            Input
	RenewalsSince time.Time
}

// BoundFound answers AskBound: Confirm is the voters' bound
// (cluster.ControlGroup.EstablishBound; now when they could not say).
type BoundFound struct{ Confirm time.Time }

// RoundDue: a round may run — the wake-up a LeaderReady asked for, or a
// notification that the membership or the table changed. In is the
// planner's input, read before now; the shell may leave it empty when
// WantsInput is false (the core runs no round then).
type RoundDue struct{ In Input }

// Proposed: the proposals of round Round returned; Errs[i] is the outcome
// of the i-th (nil: accepted; a ledger sentinel: rejected; matching
// ErrLeadershipLost or ErrNotLeader: unknown).
type Proposed struct {
	Round uint64
	Errs  []error
}

func (LeadershipChanged) leaderInput() {}
func (Barriered) leaderInput()         {}
func (BoundFound) leaderInput()        {}
func (RoundDue) leaderInput()          {}
func (Proposed) leaderInput()          {}

// LeaderReady is what the shell must do after a Step (see Leader).
type LeaderReady struct {
	Barrier  bool
	AskBound bool
	// Proposals of round Round, sorted as Planner.Plan returns them.
	Proposals []ledger.Command
	Round     uint64
	// RoundNow: Step RoundDue right away.
	RoundNow bool
	// WakeAt: Step RoundDue then (zero: only on notifications).
	WakeAt time.Time
	// Established, Lost: this Step began a term (at Bound, see
	// EstablishBound), or ended one because a proposal's outcome was
	// unknown (for the shell's log).
	Established, Lost bool
	Bound             time.Time
	// PlanErr is the planner's error of this round (a ring that cannot
	// be built); the round's expiries are proposed anyway.
	PlanErr error
}

// WantsInput reports whether a RoundDue Stepped now would run a round
// (and read its In): the shell may skip building the input otherwise.
func (l *Leader) WantsInput() bool { return l.leading && l.established && !l.inflight }

// Established reports whether this node leads an established term.
func (l *Leader) Established() bool { return l.leading && l.established }

// Stats returns the counters so far.
func (l *Leader) Stats() LoopStats { return l.stats }

// Renew judges one lease renewal this node received (Planner.Renew): now
// is the clock read after receipt, rec the node's record in this replica.
// ErrNotLeader until the term is established.
func (l *Leader) Renew(now time.Time, rec ledger.NodeRecord, inc, liveness uint64) error {
	if !l.Established() {
		return ErrNotLeader
	}
	return l.planner.Renew(now, rec, inc, liveness)
}

// WordValid is the bound to relay with the old owner's word (cluster
// version 6, Planner.WordValid): now is the clock read after receiving
// the target's ask, rec the shard in this replica. Not valid until the
// term is established.
func (l *Leader) WordValid(now time.Time, rec ledger.ShardRecord, from, to string) (time.Duration, bool) {
	if !l.Established() {
		return 0, false
	}
	return l.planner.WordValid(now, rec, from, to)
}

// Step feeds one event at now (the leader's monotonic clock) and returns
// what the shell must do.
func (l *Leader) Step(now time.Time, in LeaderInput) LeaderReady {
	switch ev := in.(type) {
	case LeadershipChanged:
		return l.leadership(now, ev.Leading)
	case Barriered:
		return l.barriered(now, ev)
	case BoundFound:
		return l.boundFound(now, ev.Confirm)
	case RoundDue:
		return l.roundDue(now, ev.In)
	case Proposed:
		return l.proposed(now, ev)
	}
	return LeaderReady{}
}

func (l *Leader) leadership(now time.Time, leading bool) LeaderReady {
	if leading == l.leading {
		return l.idle(now)
	}
	l.leading = leading
	if mutation.On(mutation.LeaderKeepsTerm) {
		// The mutation: a deposed leader keeps its term's state and, made
		// leader again, plans from it without a Barrier or a new bound.
		l.barrier, l.inflight, l.kickedNow = false, false, false
		if !leading {
			return LeaderReady{}
		}
		if l.planner.Leading() {
			l.established = true
			return LeaderReady{RoundNow: true}
		}
	}
	l.stepDown()
	if !leading {
		return LeaderReady{}
	}
	l.barrier = true
	return LeaderReady{Barrier: true}
}

func (l *Leader) stepDown() {
	l.planner.StepDown()
	l.established, l.barrier, l.inflight, l.kickedNow = false, false, false, false
	l.pendingIn = Input{}
}

func (l *Leader) barriered(now time.Time, ev Barriered) LeaderReady {
	if !l.leading || l.established || !l.barrier {
		return l.idle(now)
	}
	if ev.Err != nil {
		l.barrier = false // asked again at the next wake-up
		return LeaderReady{WakeAt: now.Add(l.interval)}
	}
	if max(ev.In.Cluster.Version, 1) < ledger.VersionLeaseRenewals || ev.RenewalsSince.IsZero() {
		// Every lease was granted by a log heartbeat the table shows.
		return l.establish(now, ev.In, now)
	}
	l.pendingIn, l.pendingNow, l.pendingV4 = ev.In, now, ev.RenewalsSince
	return LeaderReady{AskBound: true}
}

func (l *Leader) boundFound(now time.Time, confirm time.Time) LeaderReady {
	if !l.leading || l.established || !l.barrier || l.pendingNow.IsZero() {
		return l.idle(now)
	}
	in, at := l.pendingIn, l.pendingNow
	l.pendingIn, l.pendingNow = Input{}, time.Time{}
	return l.establish(at, in, EstablishBound(at, l.pendingV4, confirm))
}

// EstablishBound is a new leader's bound (Planner.Establish; design steps
// 8–9): the voters' confirm bound, never earlier than renewalsSince — the
// local time this process first saw ledger.VersionLeaseRenewals active:
// every lease a log heartbeat granted before that version was asked
// before its entry committed, hence before any replica applied it — and
// never later than now. Zero renewalsSince (not yet seen) means now.
func EstablishBound(now, renewalsSince, confirm time.Time) time.Time {
	if renewalsSince.IsZero() {
		return now
	}
	bound := confirm
	if renewalsSince.After(bound) {
		bound = renewalsSince
	}
	if bound.After(now) {
		bound = now
	}
	return bound
}

// VotersBound is the voters' confirm bound a new leader asks for
// (design step 8; BoundFound.Confirm): every renewal an earlier leader
// acknowledged was received before it. seen holds one time per voter that
// answered (this node included): the voter's receipt of the answer minus
// the age it reported of its newest confirm record of an earlier term.
// With answers from a quorum (a majority of voters) it is the latest of
// them, never later than now; with fewer it is now (nothing is known).
func VotersBound(now time.Time, seen []time.Time, voters int) time.Time {
	if len(seen) < voters/2+1 {
		return now
	}
	bound := seen[0]
	for _, t := range seen[1:] {
		if t.After(bound) {
			bound = t
		}
	}
	if bound.After(now) {
		return now
	}
	return bound
}

func (l *Leader) establish(now time.Time, in Input, bound time.Time) LeaderReady {
	l.planner.Establish(now, in, bound)
	l.established, l.barrier = true, false
	l.stats.Terms++
	return LeaderReady{Established: true, Bound: bound, RoundNow: true}
}

// idle is the answer to an event that changes nothing: the next wake-up.
func (l *Leader) idle(now time.Time) LeaderReady {
	if !l.leading || l.inflight {
		return LeaderReady{}
	}
	if !l.established {
		if l.barrier {
			return LeaderReady{}
		}
		return LeaderReady{WakeAt: now.Add(l.interval)}
	}
	return LeaderReady{WakeAt: l.wake(now, now)}
}

func (l *Leader) roundDue(now time.Time, in Input) LeaderReady {
	switch {
	case !l.leading:
		return LeaderReady{}
	case !l.established:
		if l.barrier {
			return LeaderReady{}
		}
		l.barrier = true
		return LeaderReady{Barrier: true}
	case l.inflight:
		l.kickedNow = true
		return LeaderReady{}
	}
	cmds, err := l.planner.Plan(now, in)
	l.stats.Rounds++
	l.roundAt = now
	if len(cmds) == 0 {
		return LeaderReady{PlanErr: err, WakeAt: l.wake(now, now)}
	}
	l.round++
	l.inflight, l.kickedNow = true, false
	return LeaderReady{PlanErr: err, Proposals: cmds, Round: l.round}
}

func (l *Leader) proposed(now time.Time, ev Proposed) LeaderReady {
	if !l.inflight || ev.Round != l.round {
		return l.idle(now)
	}
	l.inflight = false
	accepted, lost := 0, false
	for _, err := range ev.Errs {
		l.stats.Proposed++
		switch {
		case err == nil:
			accepted++
			l.stats.Accepted++
		case errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrNotLeader):
			l.stats.LeadershipLost++
			lost = true
		default:
			l.stats.Rejected++
		}
	}
	if lost {
		// Re-establish (Barrier first) before planning again: the table
		// may hold entries this node has not applied.
		if mutation.On(mutation.LeaderKeepsTerm) {
			return LeaderReady{Lost: true, RoundNow: true}
		}
		l.stepDown()
		return LeaderReady{Lost: true, WakeAt: now.Add(l.interval)}
	}
	if accepted > 0 || l.kickedNow {
		// The table changed (or was said to): plan the next step at once.
		l.kickedNow = false
		return LeaderReady{RoundNow: true}
	}
	return LeaderReady{WakeAt: l.wake(l.roundAt, now)}
}

// wake is the time of the next timer-driven round after a round at
// plannedAt whose proposals returned at now: an Interval later, or sooner
// when a wait of the planner (an expiry, a takeover, a fenced owner's
// FencedAfter) ends first (Planner.NextDeadline), so that the round that
// acts on it runs when it ends, not up to an Interval later.
func (l *Leader) wake(plannedAt, now time.Time) time.Time {
	wait := l.interval
	if next := l.planner.NextDeadline(); !next.IsZero() {
		wait = max(min(wait, next.Sub(plannedAt)), 0)
	}
	return now.Add(wait)
}

// InputOf is the planner's input: the committed table of st (a replica's
// state, read after a Barrier on the leader) and the members' view. The
// one builder the product (node/), the simulator and the benchmarks use.
func InputOf(st *ledger.State, members []Member) Input {
	return Input{Members: members, Shards: st.Shards(), Nodes: st.Nodes(), Elections: st.Elections(), Cluster: st.Cluster(),
		Pins: st.Pins(), Excluded: st.PlacementExcluded(), Fenced: st.FencedRanges(), Settings: st.Settings(), Applied: st.AppliedIndex()}
}

// LoopStats are cumulative counters of a Leader (the shell in node/ reports
// them).
type LoopStats struct {
	Terms          uint64 // leadership terms established
	Rounds         uint64 // planner rounds run
	Proposed       uint64 // commands proposed
	Accepted       uint64 // commands the ledger accepted
	Rejected       uint64 // commands the ledger rejected (lost a CAS: harmless)
	LeadershipLost uint64 // proposals with unknown outcome
}
