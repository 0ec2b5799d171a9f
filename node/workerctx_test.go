package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A worker context reads the clock: with no timer and no other goroutine
// running, Err and Done report the end of the term from the instant the
// guard passes (virtual time: nothing runs between the two checks but the
// test goroutine's sleep).
func TestWorkerContextReadsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		guard := time.Now().Add(time.Second)
		c := newWorkerCtx(context.Background(), guard, false)
		child, cancelChild := context.WithCancel(c)
		defer cancelChild()
		d := newWorkerCtx(context.Background(), guard, false)

		time.Sleep(time.Second - time.Nanosecond)
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the guard = %v", err)
		}
		if isClosed(c.Done()) || isClosed(d.Done()) {
			t.Fatal("Done closed before the guard")
		}
		time.Sleep(time.Nanosecond)
		if err := c.Err(); err != ErrLeaseExpired {
			t.Fatalf("Err at the guard = %v, want ErrLeaseExpired", err)
		}
		if !isClosed(c.done) {
			t.Fatal("Err reported the guard but the done channel is open")
		}
		if cause := context.Cause(c); cause != ErrLeaseExpired {
			t.Fatalf("Cause = %v", cause)
		}
		if !errors.Is(child.Err(), context.Canceled) || context.Cause(child) != ErrLeaseExpired {
			t.Fatalf("child: Err %v, Cause %v", child.Err(), context.Cause(child))
		}
		// Done alone, consulted first, sees it too.
		if !isClosed(d.Done()) {
			t.Fatal("Done at the guard is not closed")
		}
		if err := d.Err(); err != ErrLeaseExpired {
			t.Fatalf("Err after Done = %v", err)
		}
		// Sticky, even if a renewal arrives late.
		c.setGuard(time.Now().Add(time.Hour))
		if err := c.Err(); err != ErrLeaseExpired {
			t.Fatalf("Err after a late renewal = %v", err)
		}
	})
}

func TestLeaseExpiredMatches(t *testing.T) {
	for _, target := range []error{ErrLeaseExpired, ErrLostOwnership, ErrNotOwner, context.DeadlineExceeded} {
		if !errors.Is(ErrLeaseExpired, target) {
			t.Errorf("errors.Is(ErrLeaseExpired, %v) = false", target)
		}
	}
	if errors.Is(ErrLeaseExpired, context.Canceled) || errors.Is(ErrLostOwnership, ErrLeaseExpired) {
		t.Error("ErrLeaseExpired matches too much")
	}
}

// The timer cancels the context at the guard when nobody consults it, and
// re-arms when the guard moved forward in between.
// testCtxKey derives a context that is not the worker context itself.
type testCtxKey struct{}

func TestWorkerContextTimerFollowsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c := newWorkerCtx(context.Background(), start.Add(time.Second), true)
		time.Sleep(500 * time.Millisecond)
		c.setGuard(start.Add(1500 * time.Millisecond))
		if d, ok := LeaseDeadline(context.WithValue(c, testCtxKey{}, 1)); !ok || !d.Equal(start.Add(1500*time.Millisecond)) {
			t.Fatalf("LeaseDeadline = %v, %v", d, ok)
		}
		time.Sleep(700 * time.Millisecond) // past the first guard
		synctest.Wait()
		if isClosed(c.done) {
			t.Fatal("the timer cancelled at the old guard after a renewal")
		}
		time.Sleep(300 * time.Millisecond) // at the renewed guard
		synctest.Wait()
		if !isClosed(c.done) {
			t.Fatal("the timer did not cancel at the renewed guard")
		}
		if context.Cause(c) != ErrLeaseExpired {
			t.Fatalf("Cause = %v", context.Cause(c))
		}
	})
}

// Other endings keep their own error, also once the guard has passed.
func TestWorkerContextOtherEndings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancelCause(context.Background())
		guard := time.Now().Add(time.Second)
		a := newWorkerCtx(parent, guard, true)
		b := newWorkerCtx(context.Background(), guard, true)
		cancel(ErrClosed)
		b.end(ErrLostOwnership)
		time.Sleep(2 * time.Second)
		if a.Err() != context.Canceled || context.Cause(a) != ErrClosed {
			t.Fatalf("parent cancelled: Err %v, Cause %v", a.Err(), context.Cause(a))
		}
		if b.Err() != context.Canceled || context.Cause(b) != ErrLostOwnership {
			t.Fatalf("ended: Err %v, Cause %v", b.Err(), context.Cause(b))
		}
		if _, ok := LeaseDeadline(context.Background()); ok {
			t.Fatal("LeaseDeadline of a plain context")
		}
	})
}

// A child's own timeout still fires when the guard is nearer but keeps
// being renewed: the worker context reports no Deadline, so
// context.WithTimeout keeps its timer.
func TestWorkerContextChildTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWorkerCtx(context.Background(), time.Now().Add(time.Second), true)
		defer c.end(nil)
		child, cancel := context.WithTimeout(c, 3*time.Second)
		defer cancel()
		start := time.Now()
		for !isClosed(child.Done()) && time.Since(start) < 10*time.Second {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait() // timers due now have fired
			c.setGuard(time.Now().Add(time.Second))
		}
		if got := time.Since(start); got != 3*time.Second || child.Err() != context.DeadlineExceeded {
			t.Fatalf("child ended after %v with %v, want its own 3s timeout", got, child.Err())
		}
		if c.Err() != nil {
			t.Fatalf("renewed worker context ended: %v", c.Err())
		}
	})
}

// stallBackend controls the lease end the node sees and can stall every
// call the node's goroutines make to learn whether they still act, as a
// node whose loop does not get to run would.
type stallBackend struct {
	backend
	mu       sync.Mutex
	leaseEnd time.Time
	stall    chan struct{}
}

func (b *stallBackend) acting(s uint32, now time.Time) (actingState, bool) {
	b.mu.Lock()
	st, end := b.stall, b.leaseEnd
	b.mu.Unlock()
	if st != nil {
		<-st
	}
	a, ok := b.backend.acting(s, now)
	if !ok || !now.Before(end) {
		return actingState{}, false
	}
	a.until = end
	return a, true
}

// token is the agent's rule (ownership.Agent.Token) over the lease end
// acting reports.
func (b *stallBackend) token(s uint32, now time.Time) (uint64, time.Time, bool) {
	a, ok := b.acting(s, now)
	until := a.until.Add(-b.guard())
	if !ok || a.revoking || !now.Before(until) {
		return 0, time.Time{}, false
	}
	return a.epoch, until, true
}

// guard is the node's agent's Guard.
func (b *stallBackend) guard() time.Duration { return b.backend.(*netBackend).agent.Guard() }

// A worker whose node is stalled (its loop and the term's goroutine cannot
// learn anything) still sees its context end at the lease guard. Before
// worker contexts read the clock, the context stayed live until the
// stalled goroutine ran.
func TestWorkerContextStalledNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		net := NewMemNetwork()
		sb := &stallBackend{leaseEnd: time.Now().Add(10 * time.Second)}
		net.wrap = func(b backend) backend { sb.backend = b; return sb }
		n, err := Start(ctx, memConfig(net, "a"))
		if err != nil {
			t.Fatal(err)
		}
		type term struct {
			ctx   context.Context
			check chan chan error
		}
		terms := make(chan term, 4)
		runDone := make(chan error, 1)
		started := 0
		go func() {
			runDone <- n.RunShard(ctx, 0, func(wctx context.Context, tok Token) error {
				tm := term{wctx, make(chan chan error)}
				terms <- tm
				if started++; started > 1 {
					<-wctx.Done()
					return nil
				}
				// The first term answers checks until one fails: the
				// test, not the timer, decides when it looks.
				for reply := range tm.check {
					err := wctx.Err()
					reply <- err
					if err != nil {
						return nil
					}
				}
				return nil
			})
		}()
		first := <-terms
		ask := func() error {
			reply := make(chan error)
			first.check <- reply
			return <-reply
		}
		guard, ok := LeaseDeadline(first.ctx)
		if want := sb.leaseEnd.Add(-sb.guard()); !ok || !guard.Equal(want) {
			t.Fatalf("LeaseDeadline = %v, %v; want %v", guard, ok, want)
		}
		sb.mu.Lock()
		sb.stall = make(chan struct{})
		sb.mu.Unlock()

		time.Sleep(time.Until(guard) - time.Millisecond)
		if err := ask(); err != nil {
			t.Fatalf("Err a millisecond before the guard = %v", err)
		}
		time.Sleep(time.Millisecond)
		if err := ask(); !errors.Is(err, ErrLeaseExpired) {
			t.Fatalf("Err at the guard with the node stalled = %v, want ErrLeaseExpired", err)
		}
		if c := context.Cause(first.ctx); c != ErrLeaseExpired {
			t.Fatalf("Cause = %v", c)
		}

		// The node resumes with a renewed lease: a new term starts.
		sb.mu.Lock()
		sb.leaseEnd = time.Now().Add(time.Hour)
		close(sb.stall)
		sb.stall = nil
		sb.mu.Unlock()
		n.notify()
		second := <-terms
		if second.ctx.Err() != nil {
			t.Fatalf("new term's context: %v", second.ctx.Err())
		}
		cancel()
		if err := <-runDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("RunShard = %v", err)
		}
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkWorkerContextErr is the cost of the check a worker makes before
// every side effect.
func BenchmarkWorkerContextErr(b *testing.B) {
	c := newWorkerCtx(context.Background(), time.Now().Add(time.Hour), true)
	defer c.end(nil)
	for b.Loop() {
		if c.Err() != nil {
			b.Fatal("ended")
		}
	}
}

func BenchmarkWorkerContextDone(b *testing.B) {
	c := newWorkerCtx(context.Background(), time.Now().Add(time.Hour), true)
	defer c.end(nil)
	for b.Loop() {
		select {
		case <-c.Done():
			b.Fatal("ended")
		default:
		}
	}
}

// BenchmarkCancelCtxErr is the baseline: a plain context.WithCancelCause.
func BenchmarkCancelCtxErr(b *testing.B) {
	c, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	for b.Loop() {
		if c.Err() != nil {
			b.Fatal("ended")
		}
	}
}

func BenchmarkWorkerContextErrParallel(b *testing.B) {
	c := newWorkerCtx(context.Background(), time.Now().Add(time.Hour), true)
	defer c.end(nil)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c.Err() != nil {
				b.Fatal("ended")
			}
		}
	})
}

// BenchmarkTimeNow is the clock read every check includes.
func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	for b.Loop() {
		t = time.Now()
	}
	_ = t
}

// A worker goroutine that starts after a pause longer than the lease guard
// (the token was checked, then the process stalled) must not run fn on a
// lease that already ended: the start re-checks with a fresh clock. Every
// fn call here must begin before its own lease deadline.
func TestWorkerNotStartedPastGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		net := NewMemNetwork()
		sb := &stallBackend{leaseEnd: time.Now().Add(10 * time.Second)}
		net.wrap = func(b backend) backend { sb.backend = b; return sb }
		n, err := Start(ctx, memConfig(net, "a"))
		if err != nil {
			t.Fatal(err)
		}
		// The worker's goroutine stalls past the lease end (no renewal).
		workerStarting = func() { time.Sleep(20 * time.Second) }
		defer func() { workerStarting = func() {} }()
		type call struct{ at, deadline time.Time }
		calls := make(chan call, 8)
		runCtx, stop := context.WithCancel(ctx)
		runDone := make(chan error, 1)
		go func() {
			runDone <- n.RunShard(runCtx, 0, func(wctx context.Context, tok Token) error {
				d, _ := LeaseDeadline(wctx)
				calls <- call{time.Now(), d}
				<-wctx.Done()
				return nil
			})
		}()
		select {
		case c := <-calls:
			if !c.at.Before(c.deadline) {
				t.Errorf("fn started %v after its lease guard passed", c.at.Sub(c.deadline))
			}
		case <-time.After(time.Minute):
			// fn never ran: the lease ended before the worker could start.
		}
		stop()
		<-runDone
		// The shards cannot be handed over on an ended lease: close without
		// waiting for the drain.
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = n.Close(cctx)
	})
}
