package node

import (
	"context"
	"sync/atomic"
	"time"
)

// ErrLeaseExpired is the error (ctx.Err()) and the cause (context.Cause)
// of a WorkFunc's context once this node's lease guard for the term has
// passed by the monotonic clock: the node may no longer act on the shard
// unless a renewal it has not processed yet says otherwise, and then a new
// term starts with a new context. The context checks the clock every time
// Err or Done is called, so a worker that resumes after a pause sees it on
// its first check, before any other goroutine of the node has run.
//
// errors.Is(ErrLeaseExpired, ErrLostOwnership), errors.Is(ErrLeaseExpired,
// ErrNotOwner) and errors.Is(ErrLeaseExpired, context.DeadlineExceeded)
// hold.
var ErrLeaseExpired error = leaseExpiredError{}

type leaseExpiredError struct{}

func (leaseExpiredError) Error() string { return "node: lease guard passed" }

// Is makes ErrLeaseExpired match the errors a term's end and a passed
// deadline are matched with.
func (leaseExpiredError) Is(target error) bool {
	return target == ErrLostOwnership || target == ErrNotOwner || target == context.DeadlineExceeded
}

// Timeout reports true, as context.DeadlineExceeded does.
func (leaseExpiredError) Timeout() bool { return true }

// LeaseDeadline returns the local time at which the lease guard of the
// worker context ctx (or of the WorkFunc context ctx derives from) passes
// unless the lease is renewed first; ok is false if ctx is not derived from
// a WorkFunc's context. The deadline moves forward with every renewal the
// node has processed. It is not reported by ctx.Deadline: a moving
// deadline there would make context.WithTimeout(ctx, d) drop its own timer
// whenever the guard was nearer than d, and the child would then outlive d
// after the next renewal.
func LeaseDeadline(ctx context.Context) (deadline time.Time, ok bool) {
	c, ok := ctx.Value(workerCtxKey{}).(*workerCtx)
	if !ok {
		return time.Time{}, false
	}
	return c.guardTime(), true
}

type workerCtxKey struct{}

// The states of a workerCtx; a context leaves ctxLive once, for good.
const (
	ctxLive    uint32 = iota
	ctxExpired        // the lease guard passed: Err is ErrLeaseExpired
	ctxEnded          // cancelled for another reason: Err is inner's
)

// workerCtx is the context a WorkFunc receives. Besides the ordinary
// cancellation (the parent ends, the node closes, ownership moves, which
// the term's goroutine reports through end), it compares the monotonic
// clock with the term's lease guard whenever Err or Done is consulted, and
// a timer at the guard cancels it when nobody asks. The guard moves
// forward with every renewal (setGuard); the timer re-arms itself for the
// current guard when it fires early.
//
// Err and Done cost a clock read and a few atomic loads while the term is
// live.
type workerCtx struct {
	inner  context.Context // cancelCtx: Done, Value, Cause, children
	cancel context.CancelCauseFunc
	done   <-chan struct{} // inner.Done()
	base   time.Time       // monotonic reference of guard
	guard  atomic.Int64    // the guard, in nanoseconds after base
	state  atomic.Uint32
	timer  *time.Timer // nil when disarmed (tests)
}

// newWorkerCtx returns a live context under parent whose lease guard is
// until (local time, with a monotonic reading, as actingToken returns it).
// With arm, a timer cancels it at the guard.
func newWorkerCtx(parent context.Context, until time.Time, arm bool) *workerCtx {
	inner, cancel := context.WithCancelCause(parent)
	c := &workerCtx{inner: inner, cancel: cancel, done: inner.Done(), base: time.Now()}
	c.setGuard(until)
	if arm {
		// Assigned before it can fire: fire and expire read c.timer.
		c.timer = time.AfterFunc(time.Hour, c.fire)
		c.timer.Reset(time.Until(until))
	}
	return c
}

// setGuard moves the lease guard to until (a renewal, usually forward).
func (c *workerCtx) setGuard(until time.Time) { c.guard.Store(int64(until.Sub(c.base))) }

func (c *workerCtx) guardTime() time.Time {
	return c.base.Add(time.Duration(c.guard.Load()))
}

// passed reports whether the guard has passed at now.
func (c *workerCtx) passed(now time.Time) bool { return int64(now.Sub(c.base)) >= c.guard.Load() }

// fire is the timer: it expires the context if the guard has passed, and
// re-arms for the guard otherwise (it moved since the timer was set).
func (c *workerCtx) fire() {
	if c.state.Load() != ctxLive {
		return
	}
	now := time.Now()
	if c.passed(now) {
		c.expire()
		return
	}
	c.timer.Reset(c.guardTime().Sub(now))
}

// expire ends the term because the guard passed, unless it already ended.
func (c *workerCtx) expire() {
	select {
	case <-c.done: // the parent ended first: that is the reason
		c.state.CompareAndSwap(ctxLive, ctxEnded)
		c.stopTimer()
		return
	default:
	}
	if c.state.CompareAndSwap(ctxLive, ctxExpired) {
		c.cancel(ErrLeaseExpired)
		c.stopTimer()
	}
}

// end ends the term with cause (nil: context.Canceled), unless it already
// ended.
func (c *workerCtx) end(cause error) {
	if c.state.CompareAndSwap(ctxLive, ctxEnded) {
		c.cancel(cause)
	} else {
		c.cancel(nil) // release inner's resources; a no-op once cancelled
	}
	c.stopTimer()
}

func (c *workerCtx) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// Deadline returns the parent's deadline; the lease guard is reported by
// LeaseDeadline (see there why not here).
func (c *workerCtx) Deadline() (time.Time, bool) { return c.inner.Deadline() }

// Done returns a channel closed when the term ends. If the lease guard has
// already passed when Done is called, the channel is closed before Done
// returns.
func (c *workerCtx) Done() <-chan struct{} {
	if c.state.Load() == ctxLive && c.passed(time.Now()) {
		c.expire()
	}
	return c.done
}

// Err returns nil while the term is live and the lease guard has not
// passed by the clock read in this call; ErrLeaseExpired once it has;
// context.Canceled when the term ended otherwise.
func (c *workerCtx) Err() error {
	switch c.state.Load() {
	case ctxExpired:
		c.cancel(ErrLeaseExpired) // make sure done is closed; no-op after the first
		return ErrLeaseExpired
	case ctxEnded:
		return c.inner.Err()
	}
	select {
	case <-c.done:
		// The parent ended: pin that as the reason, unless the guard won.
		if c.state.CompareAndSwap(ctxLive, ctxEnded) || c.state.Load() == ctxEnded {
			return c.inner.Err()
		}
		return ErrLeaseExpired
	default:
	}
	if !c.passed(time.Now()) {
		return nil
	}
	c.expire()
	return c.Err()
}

// Value returns inner's values; workerCtxKey finds the worker context
// from any context derived from it.
func (c *workerCtx) Value(key any) any {
	if key == (workerCtxKey{}) {
		return c
	}
	return c.inner.Value(key)
}

func (c *workerCtx) String() string { return "node.workerContext" }
