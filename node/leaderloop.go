package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// proposer commits commands through the control group. node/ implements it
// over hashicorp/raft; tests use a fake.
type proposer interface {
	// Barrier returns once this node's replica has applied every entry
	// committed before the call (raft.Barrier). It fails when this node is
	// not the leader.
	Barrier(ctx context.Context) error
	// Propose commits cmd and returns the ledger's verdict: nil when
	// accepted, a ledger sentinel (errors.Is) when rejected. An error
	// matching ownership.ErrLeadershipLost or ownership.ErrNotLeader means the outcome is
	// unknown or that this node cannot propose.
	Propose(ctx context.Context, cmd ledger.Command) error
}

// batchProposer is a proposer that can commit many commands together
// (group commit into ledger.Batch entries). leaderLoop commits a round's
// proposals through it when the proposer has it: a cold start's thousands
// of grants then cost a few log entries instead of one commit round trip
// each. Every command is a CAS on what the planner saw, so committing them
// together or in any order is as safe as one by one.
type batchProposer interface {
	proposer
	// ProposeAll commits cmds and returns each one's outcome, in order,
	// with Propose's meaning.
	ProposeAll(ctx context.Context, cmds []ledger.Command) []error
}

// inputSource supplies the planner's input: the leader's gossip view and
// its committed ledger table (loopSource). It must reflect at least every
// entry applied before the call.
type inputSource interface {
	Input() ownership.Input
}

// loopClock is the time source of the leader loop; nil means the real clock.
type loopClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// loopConfig configures a leaderLoop.
type loopConfig struct {
	// Interval is the period of timer-driven rounds (0: the planner's
	// RenewEvery). Rounds also run on Notify, coalesced.
	Interval time.Duration
	// Clock is the time source; nil means the real clock.
	Clock loopClock
	// Logger receives proposals and errors; nil discards.
	Logger *slog.Logger
	// ConfirmBound, when the core asks (ownership.LeaderReady.AskBound: cluster
	// version 4 active), returns the voters' bound from their confirm
	// records (cluster.ControlGroup.EstablishBound): now when unsure. nil
	// means now. It may block on RPCs until ctx ends; renewals are refused
	// (ownership.ErrNotLeader) until the term is established. The core clamps it
	// (EstablishBound).
	ConfirmBound func(ctx context.Context, now time.Time) time.Time
	// RenewalsSince returns the local time this process first saw cluster
	// version 4 (ledger.VersionLeaseRenewals) active in its replica, zero
	// when not yet; nil means never.
	RenewalsSince func() time.Time
	// OnEstablished, if set, is called (without the loop's lock) after
	// each Step that established a term: renewals held for it go on.
	OnEstablished func()
}

// leaderLoop is the thin goroutine shell that runs the ownership.Leader core on the
// control group's leader: it feeds it leadership changes, notifications
// (Notify: coalesced, a burst of events causes one round) and its
// wake-ups, and carries out its ownership.LeaderReady — the Barrier, the voters'
// bound, a round's proposals (committed together if the proposer is a
// batchProposer, else one by one). Every decision is the core's (ownership.Leader);
// this shell only waits and talks to Raft. A proposal whose outcome is
// unknown is never specially handled: the next term sees the committed
// table and, because every command is a CAS on what the planner saw,
// re-proposing is safe.
type leaderLoop struct {
	prop proposer
	src  inputSource
	cfg  loopConfig
	log  *slog.Logger
	kick chan struct{}

	// mu guards the core: Run's Steps and Renew.
	mu   sync.Mutex
	core *ownership.Leader
}

// newLeaderLoop returns a loop around planner; the planner must not be used
// by anyone else while Run runs (Renew goes through the loop).
func newLeaderLoop(planner *ownership.Planner, prop proposer, src inputSource, cfg loopConfig) *leaderLoop {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &leaderLoop{core: ownership.NewLeader(planner, cfg.Interval), prop: prop, src: src, cfg: cfg, log: log, kick: make(chan struct{}, 1)}
}

// Notify asks for a round soon (membership or ledger change). It never
// blocks; notifications before the round starts coalesce into one.
func (l *leaderLoop) Notify() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Stats returns the counters so far. Safe for concurrent use.
func (l *leaderLoop) Stats() ownership.LoopStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.Stats()
}

// Renew judges one lease renewal received by this node (ownership.Leader.Renew),
// serialized with the loop's rounds: now is the clock read after receipt,
// rec the node's record in this replica. Safe for concurrent use; it
// returns ownership.ErrNotLeader until the term is established.
func (l *leaderLoop) Renew(now time.Time, rec ledger.NodeRecord, inc, liveness uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.Renew(now, rec, inc, liveness)
}

// WordValid is Leader.WordValid, serialized with the loop's rounds: the
// bound to relay with an old owner's word (cluster version 6). shard
// reads the shard's record (from the replica); it is called under the
// loop's lock, so the record is at least as new as any table a round
// observed (a round reads its input outside the lock, and the replica
// only moves forward): the planner never sees a record older than its
// own view as an unobserved Revoke. ok false from shard: no word.
func (l *leaderLoop) WordValid(now time.Time, shard func() (ledger.ShardRecord, bool), from, to string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := shard()
	if !ok {
		return 0, false
	}
	return l.core.WordValid(now, rec, from, to)
}

func (l *leaderLoop) step(in ownership.LeaderInput) ownership.LeaderReady {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	rd := l.core.Step(now, in)
	l.mu.Unlock()
	if rd.Established && l.cfg.OnEstablished != nil {
		l.cfg.OnEstablished()
	}
	return rd
}

// Run runs the loop until ctx ends, following leadership changes from
// leaderCh (true: this node became leader; false: it lost leadership). It
// returns ctx's error.
func (l *leaderLoop) Run(ctx context.Context, leaderCh <-chan bool) error {
	defer l.step(ownership.LeadershipChanged{Leading: false})
	var rd ownership.LeaderReady
	for {
		rd = l.carryOut(ctx, rd)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var timer <-chan time.Time
		if !rd.WakeAt.IsZero() {
			timer = l.cfg.Clock.After(max(rd.WakeAt.Sub(l.cfg.Clock.Now()), 0))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case leader := <-leaderCh:
			rd = l.step(ownership.LeadershipChanged{Leading: leader})
			if !leader {
				l.log.Info("ownership: leadership lost")
			}
		case <-l.kick:
			rd = l.roundDue()
		case <-timer:
			rd = l.roundDue()
		}
	}
}

// roundDue steps ownership.RoundDue with the input read before the clock: a now
// read first can be older than state the input holds (a heartbeat
// committed in between), and the planner would judge that state at a
// time before it existed.
func (l *leaderLoop) roundDue() ownership.LeaderReady {
	l.mu.Lock()
	wants := l.core.WantsInput()
	l.mu.Unlock()
	var in ownership.Input
	if wants {
		in = l.src.Input()
	}
	return l.step(ownership.RoundDue{In: in})
}

// carryOut does what rd asks until what is left is waiting (a WakeAt, or
// nothing until the next event), and returns that.
func (l *leaderLoop) carryOut(ctx context.Context, rd ownership.LeaderReady) ownership.LeaderReady {
	for ctx.Err() == nil {
		if rd.PlanErr != nil {
			l.log.Error("ownership: planner", "err", rd.PlanErr)
		}
		if rd.Established {
			l.log.Info("ownership: leadership established")
		}
		switch {
		case rd.Barrier:
			err := l.prop.Barrier(ctx)
			if err != nil {
				l.log.Warn("ownership: barrier failed; will retry", "err", err)
				rd = l.step(ownership.Barriered{Err: err})
				continue
			}
			ev := ownership.Barriered{In: l.src.Input()} // the input first: now must not precede it
			if l.cfg.RenewalsSince != nil {
				ev.RenewalsSince = l.cfg.RenewalsSince()
			}
			rd = l.step(ev)
		case rd.AskBound:
			now := l.cfg.Clock.Now()
			confirm := now
			if l.cfg.ConfirmBound != nil {
				confirm = l.cfg.ConfirmBound(ctx, now)
			}
			rd = l.step(ownership.BoundFound{Confirm: confirm})
		case len(rd.Proposals) > 0:
			errs := l.propose(ctx, rd.Proposals)
			if ctx.Err() != nil {
				return ownership.LeaderReady{}
			}
			rd = l.step(ownership.Proposed{Round: rd.Round, Errs: errs})
			if rd.Lost {
				l.log.Warn("ownership: a proposal's outcome is unknown; establishing the term again")
			}
		case rd.RoundNow:
			rd = l.roundDue()
		default:
			return rd
		}
	}
	return ownership.LeaderReady{}
}

// propose commits a round's proposals and returns their outcomes: together
// through a batchProposer, else one by one, stopping at the first unknown
// outcome (the rest count as unknown too: the term ends).
func (l *leaderLoop) propose(ctx context.Context, cmds []ledger.Command) []error {
	if bp, ok := l.prop.(batchProposer); ok && len(cmds) > 1 {
		errs := bp.ProposeAll(ctx, cmds)
		if len(errs) != len(cmds) {
			l.log.Error("ownership: ProposeAll returned the wrong number of outcomes", "cmds", len(cmds), "outcomes", len(errs))
			errs = make([]error, len(cmds))
			for i := range errs {
				errs[i] = fmt.Errorf("ownership: no outcome from ProposeAll: %w", ownership.ErrLeadershipLost)
			}
		}
		l.logOutcomes(cmds, errs)
		return errs
	}
	errs := make([]error, 0, len(cmds))
	for _, c := range cmds {
		err := l.prop.Propose(ctx, c)
		errs = append(errs, err)
		if errors.Is(err, ownership.ErrLeadershipLost) || errors.Is(err, ownership.ErrNotLeader) || ctx.Err() != nil {
			break
		}
	}
	l.logOutcomes(cmds[:len(errs)], errs)
	return errs
}

func (l *leaderLoop) logOutcomes(cmds []ledger.Command, errs []error) {
	for i, c := range cmds {
		switch err := errs[i]; {
		case err == nil:
			l.log.Debug("ownership: committed", "cmd", ledger.KindOf(c).String())
		case errors.Is(err, ownership.ErrLeadershipLost) || errors.Is(err, ownership.ErrNotLeader):
			l.log.Warn("ownership: proposal outcome unknown", "cmd", ledger.KindOf(c).String(), "err", err)
		default:
			l.log.Debug("ownership: proposal rejected", "cmd", ledger.KindOf(c).String(), "err", err)
		}
	}
}
