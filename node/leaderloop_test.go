package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ownership"
)

// The leader loop's tests: the shell (node/leaderloop.go) around the pure
// ownership.Leader core, over a fake control group that applies proposals
// to a real ledger replica.

// fakeRaft is a proposer and inputSource over a ledger replica, with one
// injectable failure.
type fakeRaft struct {
	mu       sync.Mutex
	fsm      *ledger.FSM
	index    uint64
	members  []ownership.Member
	barriers int
	// loseNext makes the next Propose apply the command but report
	// ErrLeadershipLost (outcome unknown, actually committed).
	loseNext bool
}

var _ proposer = (*fakeRaft)(nil)
var _ inputSource = (*fakeRaft)(nil)

// newFakeRaft returns a fakeRaft whose members ids are alive and healthy
// and have registered (one heartbeat each).
func newFakeRaft(t *testing.T, ids ...string) *fakeRaft {
	t.Helper()
	fsm, err := ledger.NewFSM(ledger.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRaft{fsm: fsm}
	for _, id := range ids {
		f.members = append(f.members, ownership.Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1})
	}
	f.heartbeatAll()
	return f
}

func (f *fakeRaft) Barrier(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.barriers++
	return nil
}

func (f *fakeRaft) apply(c ledger.Command) error {
	f.index++
	return f.fsm.ApplyCommand(f.index, c).Err
}

func (f *fakeRaft) Propose(ctx context.Context, c ledger.Command) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.apply(c)
	if f.loseNext {
		f.loseNext = false
		return fmt.Errorf("raft: %w", ownership.ErrLeadershipLost)
	}
	return err
}

func (f *fakeRaft) Input() ownership.Input {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ownership.InputOf(f.fsm.State(), f.members)
}

func (f *fakeRaft) heartbeatAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if err := f.apply(ledger.Heartbeat{Node: m.ID, Incarnation: m.Incarnation, Now: time.Now().UnixNano()}); err != nil {
			panic(fmt.Sprintf("heartbeat %s: %v", m.ID, err))
		}
	}
}

// node is id's record in the replica.
func (f *fakeRaft) node(id string) ledger.NodeRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, _ := f.fsm.State().Node(id)
	return rec
}

// heartbeatUntil heartbeats every node each interval until done holds for
// the number of validly owned shards, failing with what() after 10 s of
// virtual time.
func (f *fakeRaft) heartbeatUntil(t *testing.T, every time.Duration, done func(owned int) bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(every)
		f.heartbeatAll()
		total := 0
		for _, n := range f.owners() {
			total += n
		}
		if done(total) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after 10s (virtual): %v", what(), f.owners())
		}
	}
}

// runLoop runs loop as the leader; stop ends its term, cancels Run and
// checks that Run returned context.Canceled.
func runLoop(t *testing.T, loop *leaderLoop) (stop func()) {
	leaderCh := make(chan bool, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx, leaderCh) }()
	leaderCh <- true
	return func() {
		leaderCh <- false
		cancel()
		if err := <-done; err != context.Canceled {
			t.Fatalf("Run returned %v", err)
		}
	}
}

func (f *fakeRaft) owners() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.fsm.State()
	out := map[string]int{}
	for _, r := range st.Shards() {
		n, ok := st.Node(r.Owner)
		if r.State == ledger.ShardOwned && ledger.OwnershipValidWith(r, n, ok) {
			out[r.Owner]++
		}
	}
	return out
}

func TestLeaderLoopGrantsAndSurvivesLeadershipLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := ownership.TestConfig()
		p, err := ownership.NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f := newFakeRaft(t, "n1", "n2", "n3")
		f.loseNext = true
		loop := newLeaderLoop(p, f, f, loopConfig{})
		stop := runLoop(t, loop)

		f.heartbeatUntil(t, cfg.RenewEvery, func(owned int) bool { return owned == cfg.Ring.Partitions },
			func() string { return "not every shard owned" })
		st := loop.Stats()
		if st.LeadershipLost != 1 || f.barriers < 2 || st.Terms < 2 {
			t.Fatalf("leadership loss not handled by re-establishing: stats %+v barriers %d", st, f.barriers)
		}
		stop()
	})
}

func TestLeaderLoopFollowerProposesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := ownership.NewPlanner(ownership.TestConfig())
		f := newFakeRaft(t, "n1")
		loop := newLeaderLoop(p, f, f, loopConfig{})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		loop.Notify()
		if err := loop.Run(ctx, make(chan bool)); err != context.DeadlineExceeded {
			t.Fatalf("Run returned %v", err)
		}
		if st := loop.Stats(); st.Proposed != 0 || f.barriers != 0 {
			t.Fatalf("a follower proposed: %+v", st)
		}
	})
}

// orderClock and orderSource record the order in which a round reads the
// clock and the state.
type orderClock struct {
	mu  *sync.Mutex
	log *[]string
}

func (c orderClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.log = append(*c.log, "now")
	return time.Now()
}

func (c orderClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

type orderSource struct {
	*fakeRaft
	mu  *sync.Mutex
	log *[]string
}

func (s orderSource) Input() ownership.Input {
	in := s.fakeRaft.Input()
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.log = append(*s.log, "input")
	return in
}

// A round must read its input before the clock: a now read first can be
// older than state the input holds (a heartbeat committed in between), and
// the planner would judge that state at a time before it existed.
func TestLeaderLoopReadsInputBeforeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := ownership.NewPlanner(ownership.TestConfig())
		f := newFakeRaft(t, "n1")
		var mu sync.Mutex
		var log []string
		loop := newLeaderLoop(p, f, orderSource{f, &mu, &log}, loopConfig{Clock: orderClock{&mu, &log}})
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		leaderCh := make(chan bool, 1)
		leaderCh <- true
		_ = loop.Run(ctx, leaderCh)
		mu.Lock()
		defer mu.Unlock()
		// Every input is followed by the clock it is planned at (the
		// shell reads the clock for its timers too, in between).
		inputs := 0
		for i, r := range log {
			if r != "input" {
				continue
			}
			inputs++
			if i+1 == len(log) || log[i+1] != "now" {
				t.Fatalf("read %d: want input then now, got %v", i, log)
			}
		}
		if inputs < 2 {
			t.Fatalf("too few reads: %v", log)
		}
	})
}

// renewalsSource is a Source whose table runs cluster version 4 (renewals
// off the log, settings logged): the core asks for the voters' bound.
type renewalsSource struct{ input func() ownership.Input }

func (s renewalsSource) Input() ownership.Input {
	in := s.input()
	in.Cluster.Version, in.Settings.Logged = ledger.VersionLeaseRenewals, true
	return in
}

// longAgo is a loopConfig.RenewalsSince: version 4 seen active an hour
// before the test's clock started.
func longAgo() time.Time { return time.Now().Add(-time.Hour) }

// The loop refuses renewals until its term is established, calls
// loopConfig.ConfirmBound after the Barrier with the clock it establishes at, and
// expires a silent node from that bound; renewals through LeaderLoop.Renew
// keep a node alive (run under -race: Renew and the rounds share the
// planner).
func TestLeaderLoopRenewAndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := ownership.TestConfig()
		p, err := ownership.NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f := newFakeRaft(t, "n1", "n2")
		var boundAt time.Time
		boundCalled := make(chan struct{})
		loop := newLeaderLoop(p, f, renewalsSource{f.Input}, loopConfig{ConfirmBound: func(ctx context.Context, now time.Time) time.Time {
			boundAt = now
			close(boundCalled)
			// The voters' last confirm: half a lease ago.
			return now.Add(-cfg.Lease / 2)
		}, RenewalsSince: longAgo})
		rec := f.node
		if err := loop.Renew(time.Now(), rec("n1"), 1, 1); err != ownership.ErrNotLeader {
			t.Fatalf("renew before the term: %v, want ownership.ErrNotLeader", err)
		}
		stop := runLoop(t, loop)
		<-boundCalled
		synctest.Wait()
		// n1 renews every RenewEvery; n2 is silent. n2 is expired
		// Lease·(1+δ) after the bound, i.e. about Lease·(1+δ) − Lease/2
		// after establishing.
		expireAt := boundAt.Add(-cfg.Lease / 2).Add(cfg.ExpireAfter())
		for time.Now().Before(boundAt.Add(2 * cfg.Lease)) {
			if err := loop.Renew(time.Now(), rec("n1"), 1, 1); err != nil {
				t.Fatalf("renew n1: %v", err)
			}
			if r := rec("n2"); r.Liveness != 1 && time.Now().Before(expireAt) {
				t.Fatalf("n2 expired at %v after establishing, before bound + Lease·(1+δ) (%v)", time.Since(boundAt), expireAt.Sub(boundAt))
			}
			if r := rec("n2"); r.Liveness == 1 && !time.Now().Before(boundAt.Add(cfg.ExpireAfter()-cfg.RenewEvery/2)) {
				t.Fatalf("n2 not expired %v after establishing: the bound was ignored (expiry due at %v)", time.Since(boundAt), expireAt.Sub(boundAt))
			}
			time.Sleep(cfg.RenewEvery)
		}
		if r := rec("n2"); r.Liveness == 1 {
			t.Fatalf("silent n2 not expired 2·Lease after establishing")
		}
		if r := rec("n1"); r.Liveness != 1 {
			t.Fatalf("renewing n1 expired: %+v", r)
		}
		stop()
	})
}

// batchRaft is a fakeRaft that commits a round's proposals together.
type batchRaft struct {
	*fakeRaft
	calls, cmds int
}

func (b *batchRaft) ProposeAll(ctx context.Context, cmds []ledger.Command) []error {
	b.mu.Lock()
	b.calls++
	b.cmds += len(cmds)
	b.mu.Unlock()
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		errs[i] = b.Propose(ctx, c)
	}
	return errs
}

// TestLeaderLoopBatchProposer: with a BatchProposer the loop hands a
// round's proposals over at once, counts every outcome, and an unknown
// outcome among them still ends the term (Barrier, Establish) as one does
// when proposing one by one.
func TestLeaderLoopBatchProposer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := ownership.TestConfig()
		p, err := ownership.NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f := &batchRaft{fakeRaft: newFakeRaft(t, "n1", "n2", "n3")}
		f.loseNext = true
		loop := newLeaderLoop(p, f, f, loopConfig{})
		stop := runLoop(t, loop)
		f.heartbeatUntil(t, cfg.RenewEvery, func(owned int) bool { return owned == cfg.Ring.Partitions && loop.Stats().Terms >= 2 },
			func() string {
				return fmt.Sprintf("not every shard owned, or no new term after the unknown outcome (stats %+v)", loop.Stats())
			})
		stop()
		st := loop.Stats()
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.calls == 0 || f.cmds < cfg.Ring.Partitions {
			t.Fatalf("ProposeAll: %d calls, %d commands; want the grants of %d shards", f.calls, f.cmds, cfg.Ring.Partitions)
		}
		if st.Proposed < uint64(f.cmds) || st.LeadershipLost != 1 || f.barriers < 2 || st.Terms < 2 {
			t.Fatalf("stats %+v, barriers %d, batched commands %d", st, f.barriers, f.cmds)
		}
	})
}

// The loop proposes an expiry when it is due (Planner.NextDeadline), not at
// its next periodic round: with an Interval far longer than the lease, a
// silent node is still expired within a millisecond of bound + Lease·(1+δ),
// and a node renewing through LeaderLoop.Renew is not.
func TestLeaderLoopExpiresOnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := ownership.TestConfig()
		p, err := ownership.NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f := newFakeRaft(t, "n1", "n2")
		var boundAt time.Time
		boundCalled := make(chan struct{})
		loop := newLeaderLoop(p, f, renewalsSource{f.Input}, loopConfig{Interval: 10 * cfg.Lease, ConfirmBound: func(ctx context.Context, now time.Time) time.Time {
			boundAt = now.Add(-cfg.Lease / 2)
			close(boundCalled)
			return boundAt
		}, RenewalsSince: longAgo})
		rec := f.node
		stop := runLoop(t, loop)
		<-boundCalled
		synctest.Wait()
		expireAt := boundAt.Add(cfg.ExpireAfter())
		lastRenew := time.Now()
		for rec("n2").Liveness == 1 {
			if time.Now().After(expireAt.Add(time.Millisecond)) {
				t.Fatalf("n2 not expired %v after its expiry was due (Interval %v)", time.Since(expireAt), 10*cfg.Lease)
			}
			if time.Since(lastRenew) >= cfg.RenewEvery {
				if err := loop.Renew(time.Now(), rec("n1"), 1, 1); err != nil {
					t.Fatalf("renew n1: %v", err)
				}
				lastRenew = time.Now()
			}
			time.Sleep(100 * time.Microsecond)
		}
		if time.Now().Before(expireAt) {
			t.Fatalf("n2 expired %v before its expiry was due", time.Until(expireAt))
		}
		if r := rec("n1"); r.Liveness != 1 {
			t.Fatalf("renewing n1 expired: %+v", r)
		}
		stop()
	})
}
