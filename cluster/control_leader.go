package cluster

// The leader loop: Raft's notify channel, establishing a term (Barrier
// once), the reconcile loop while leader, and the lossless queue behind
// ControlGroup.Leadership.

import (
	"context"
	"sync"
	"time"
)

// notifyLoop reads Raft's NotifyCh promptly, so Raft never blocks on it, and
// leaves the latest value for the leader loop.
func (g *ControlGroup) notifyLoop() {
	for {
		select {
		case v := <-g.notifyCh:
			g.notifyLatest.Store(v)
			signal(g.notifySig)
		case <-g.closing:
			return
		}
	}
}

// leaderLoop establishes leadership (Barrier once per term) and revokes it,
// symmetrically, and runs the reconcile loop while leader.
func (g *ControlGroup) leaderLoop() {
	var (
		term uint64 // established term, 0 if not leader
		stop func() // stops the reconcile loop and waits for it
	)
	revoke := func() {
		if term == 0 {
			return
		}
		stop()
		g.established.Store(0)
		g.events.push(LeadershipEvent{Leader: false, Term: term})
		g.log.Info("cluster: leadership revoked", "term", term)
		term = 0
	}
	defer revoke()
	for {
		select {
		case <-g.notifySig:
		case <-g.closing:
			return
		}
		leader := g.notifyLatest.Load() && g.isRaftLeader()
		if term != 0 && (!leader || g.currentTerm() != term) {
			revoke()
		}
		if !leader || term != 0 {
			continue
		}
		t, ok := g.establish()
		if !ok {
			continue
		}
		term = t
		g.established.Store(term)
		g.events.push(LeadershipEvent{Leader: true, Term: term})
		g.log.Info("cluster: leadership established", "term", term)
		stop = g.startReconcile()
		// A notification that arrived during establish is handled next
		// round (notifySig is still set).
	}
}

// startReconcile runs the reconcile loop until the returned stop is called;
// stop waits for it to end.
func (g *ControlGroup) startReconcile() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		g.reconcileLoop(ctx)
	}()
	return func() {
		cancel()
		<-stopped
	}
}

// establish issues a Barrier in the current term, retrying while still
// leader. It returns the term in which the Barrier succeeded (the term is
// read before the Barrier and checked after it, so a Barrier that straddles
// a leadership change never counts for the newer term).
func (g *ControlGroup) establish() (uint64, bool) {
	for {
		r := g.rft()
		if r == nil {
			return 0, false
		}
		term := r.CurrentTerm()
		err := g.wait(r.Barrier(g.cfg.RPCTimeout))
		if err == nil && g.currentTerm() == term && g.isRaftLeader() {
			return term, true
		}
		if err != nil {
			g.log.Warn("cluster: barrier failed", "err", err)
		}
		if !g.isRaftLeader() {
			return 0, false
		}
		select {
		case <-g.closing:
			return 0, false
		case <-time.After(g.cfg.CommitTimeout):
		}
	}
}

// eventQueue delivers leadership events in order without ever blocking the
// producer.
type eventQueue struct {
	mu    sync.Mutex
	queue []LeadershipEvent
	sig   chan struct{}
	out   chan LeadershipEvent
}

func newEventQueue() *eventQueue {
	return &eventQueue{sig: make(chan struct{}, 1), out: make(chan LeadershipEvent)}
}

func (q *eventQueue) push(ev LeadershipEvent) {
	q.mu.Lock()
	q.queue = append(q.queue, ev)
	q.mu.Unlock()
	signal(q.sig)
}

func (q *eventQueue) run(closing <-chan struct{}) func() {
	return func() {
		for {
			q.mu.Lock()
			var ev LeadershipEvent
			has := len(q.queue) > 0
			if has {
				ev = q.queue[0]
			}
			q.mu.Unlock()
			if !has {
				select {
				case <-q.sig:
					continue
				case <-closing:
					return
				}
			}
			select {
			case q.out <- ev:
				q.mu.Lock()
				q.queue = q.queue[1:]
				q.mu.Unlock()
			case <-closing:
				return
			}
		}
	}
}

func (q *eventQueue) closeOut() { close(q.out) }
