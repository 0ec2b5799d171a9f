package ownership

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// Proposer commits commands through the control group. node/ implements it
// over hashicorp/raft; tests use a fake.
type Proposer interface {
	// Barrier returns once this node's replica has applied every entry
	// committed before the call (raft.Barrier). It fails when this node is
	// not the leader.
	Barrier(ctx context.Context) error
	// Propose commits cmd and returns the ledger's verdict: nil when
	// accepted, a ledger sentinel (errors.Is) when rejected. An error
	// matching ErrLeadershipLost or ErrNotLeader means the outcome is
	// unknown or that this node cannot propose.
	Propose(ctx context.Context, cmd ledger.Command) error
}

// BatchProposer is a Proposer that can commit many commands together
// (group commit into ledger.Batch entries). LeaderLoop commits a round's
// proposals through it when the Proposer has it: a cold start's thousands
// of grants then cost a few log entries instead of one commit round trip
// each. Every command is a CAS on what the planner saw, so committing them
// together or in any order is as safe as one by one.
type BatchProposer interface {
	Proposer
	// ProposeAll commits cmds and returns each one's outcome, in order,
	// with Propose's meaning.
	ProposeAll(ctx context.Context, cmds []ledger.Command) []error
}

// Source supplies the planner's input: the leader's gossip view and its
// committed ledger table. It must reflect at least every entry applied
// before the call.
type Source interface {
	Input() Input
}

// Clock is the time source of the leader loop; nil means the real clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// LoopConfig configures a LeaderLoop.
type LoopConfig struct {
	// Interval is the period of timer-driven rounds (0: the planner's
	// RenewEvery). Rounds also run on Notify, coalesced.
	Interval time.Duration
	// Clock is the time source; nil means the real clock.
	Clock Clock
	// Logger receives proposals and errors; nil discards.
	Logger *slog.Logger
	// Bound, when set, is called after the Barrier of every new term with
	// the leader's clock; it returns the new leader's bound (Planner.
	// Establish): the earliest time, by this clock, before which every
	// lease granted by an earlier leader was asked — from the voters'
	// confirm records under cluster version 4, or now when unsure. nil
	// means now. It may block on RPCs until ctx ends; renewals are refused
	// (ErrNotLeader) until it returns.
	Bound func(ctx context.Context, now time.Time) time.Time
}

// LoopStats are cumulative counters of a LeaderLoop.
type LoopStats struct {
	Terms          uint64 // leadership terms established
	Rounds         uint64 // planner rounds run
	Proposed       uint64 // commands proposed
	Accepted       uint64 // commands the ledger accepted
	Rejected       uint64 // commands the ledger rejected (lost a CAS: harmless)
	LeadershipLost uint64 // proposals with unknown outcome
}

// LeaderLoop is the thin shell that runs the Planner on the control group's
// leader: on becoming leader it waits for a Barrier and calls Establish;
// then it runs a round on every Notify (coalesced: a burst of events causes
// one round), every Interval, and when a wait of the planner ends
// (Planner.NextDeadline: an expiry is proposed when it is due, not up to
// an Interval later), and commits the round's proposals one by
// one (together, if the Proposer is a BatchProposer). A proposal whose outcome is unknown is never specially handled: the
// next round sees the committed table and, because every command is a CAS
// on what the planner saw, re-proposing is safe.
type LeaderLoop struct {
	planner *Planner
	prop    Proposer
	src     Source
	cfg     LoopConfig
	log     *slog.Logger
	kick    chan struct{}

	// pmu serializes every use of the planner: rounds' Plan, Establish,
	// StepDown and Renew. Proposals run outside it.
	pmu sync.Mutex

	mu    sync.Mutex
	stats LoopStats
}

// NewLeaderLoop returns a loop around planner; the planner must not be used
// by anyone else while Run runs (Renew goes through the loop).
func NewLeaderLoop(planner *Planner, prop Proposer, src Source, cfg LoopConfig) *LeaderLoop {
	if cfg.Interval <= 0 {
		cfg.Interval = planner.cfg.RenewEvery
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LeaderLoop{planner: planner, prop: prop, src: src, cfg: cfg, log: log, kick: make(chan struct{}, 1)}
}

// Notify asks for a round soon (membership or ledger change). It never
// blocks; notifications before the round starts coalesce into one.
func (l *LeaderLoop) Notify() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Stats returns the counters so far. Safe for concurrent use.
func (l *LeaderLoop) Stats() LoopStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

func (l *LeaderLoop) count(f func(*LoopStats)) {
	l.mu.Lock()
	f(&l.stats)
	l.mu.Unlock()
}

// Renew judges one lease renewal received by this node (Planner.Renew),
// serialized with the loop's rounds: now is the clock read after receipt,
// rec the node's record in this replica. Safe for concurrent use; it
// returns ErrNotLeader until the term is established.
func (l *LeaderLoop) Renew(now time.Time, rec ledger.NodeRecord, inc, liveness uint64) error {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	return l.planner.Renew(now, rec, inc, liveness)
}

func (l *LeaderLoop) stepDown() {
	l.pmu.Lock()
	l.planner.StepDown()
	l.pmu.Unlock()
}

// Run runs the loop until ctx ends, following leadership changes from
// leaderCh (true: this node became leader; false: it lost leadership). It
// returns ctx's error.
func (l *LeaderLoop) Run(ctx context.Context, leaderCh <-chan bool) error {
	leading, established := false, false
	wait := l.cfg.Interval
	defer l.stepDown()
	for {
		timer := l.cfg.Clock.After(wait)
		wait = l.cfg.Interval
		select {
		case <-ctx.Done():
			return ctx.Err()
		case leader := <-leaderCh:
			if leader != leading {
				leading, established = leader, false
				if !leader {
					l.stepDown()
					l.log.Info("ownership: leadership lost")
				}
			}
		case <-l.kick:
		case <-timer:
		}
		if !leading {
			continue
		}
		if !established {
			if err := l.prop.Barrier(ctx); err != nil {
				l.log.Warn("ownership: barrier failed; will retry", "err", err)
				continue
			}
			in := l.src.Input() // the input first: now must not precede it
			now := l.cfg.Clock.Now()
			var bound time.Time
			if l.cfg.Bound != nil {
				bound = l.cfg.Bound(ctx, now)
			}
			l.pmu.Lock()
			l.planner.Establish(now, in, bound)
			l.pmu.Unlock()
			established = true
			l.count(func(s *LoopStats) { s.Terms++ })
			l.log.Info("ownership: leadership established")
		}
		now, lost := l.round(ctx)
		if lost {
			// Re-establish (Barrier first) before planning again: the
			// table may hold entries this node has not applied.
			l.stepDown()
			established = false
			continue
		}
		wait = l.wait(now)
	}
}

// wait is how long the loop sleeps before its next timer-driven round: the
// Interval, or less when a wait of the planner (an expiry, a takeover, a
// fenced owner's FencedAfter) ends sooner (Planner.NextDeadline), so that
// the round that acts on it runs when it ends, not up to an Interval
// later. It counts from now, the clock the last round planned at: a round
// that proposed something asks for the next at once (Notify), and that
// one, proposing nothing, takes no time.
func (l *LeaderLoop) wait(now time.Time) time.Duration {
	l.pmu.Lock()
	next := l.planner.NextDeadline()
	l.pmu.Unlock()
	if next.IsZero() {
		return l.cfg.Interval
	}
	return max(min(l.cfg.Interval, next.Sub(now)), 0)
}

// round runs the planner once at now and commits its proposals; it reports
// whether leadership was lost meanwhile.
func (l *LeaderLoop) round(ctx context.Context) (now time.Time, lost bool) {
	// Read the input before the clock: a now read first can be older than
	// state the input holds (a heartbeat committed in between), and the
	// planner would judge that state at a time before it existed.
	in := l.src.Input()
	now = l.cfg.Clock.Now()
	l.pmu.Lock()
	cmds, err := l.planner.Plan(now, in)
	l.pmu.Unlock()
	l.count(func(s *LoopStats) { s.Rounds++ })
	if err != nil {
		l.log.Error("ownership: planner", "err", err)
	}
	accepted := 0
	var errs []error
	if bp, ok := l.prop.(BatchProposer); ok && len(cmds) > 1 {
		errs = bp.ProposeAll(ctx, cmds)
		if len(errs) != len(cmds) {
			l.log.Error("ownership: ProposeAll returned the wrong number of outcomes", "cmds", len(cmds), "outcomes", len(errs))
			return now, false
		}
	}
	lost = false
	for i, c := range cmds {
		var err error
		if errs != nil {
			err = errs[i]
		} else {
			err = l.prop.Propose(ctx, c)
		}
		l.count(func(s *LoopStats) { s.Proposed++ })
		switch {
		case err == nil:
			accepted++
			l.count(func(s *LoopStats) { s.Accepted++ })
			l.log.Debug("ownership: committed", "cmd", ledger.KindOf(c).String())
		case errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrNotLeader):
			l.count(func(s *LoopStats) { s.LeadershipLost++ })
			l.log.Warn("ownership: proposal outcome unknown", "cmd", ledger.KindOf(c).String(), "err", err)
			if errs == nil {
				return now, true
			}
			lost = true // the others' outcomes are in: count them
		case ctx.Err() != nil:
			return now, false
		default:
			l.count(func(s *LoopStats) { s.Rejected++ })
			l.log.Debug("ownership: proposal rejected", "cmd", ledger.KindOf(c).String(), "err", err)
		}
	}
	if lost {
		return now, true
	}
	if accepted > 0 {
		l.Notify() // the table changed: plan the next step right away
	}
	return now, false
}
