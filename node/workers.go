package node

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// WorkFunc is the work a node runs while it owns a shard or leads an
// election. tok is the fencing token of this ownership term: pass it with
// every side effect. ctx is cancelled when the term ends — before the
// node's lease ends, so a WorkFunc that stops promptly after ctx is done
// never overlaps the next owner's. Returning nil ends the work for this
// term (it runs again in the next term); returning an error stops the
// Run method that called it, which returns the error.
type WorkFunc func(ctx context.Context, tok Token) error

// RunLeader runs fn every time this node becomes the leader of e, until ctx
// is done or the node closes (returning ctx's error or ErrClosed), or fn
// returns an error (returned wrapped). See WorkFunc for the contract.
func (n *Node) RunLeader(ctx context.Context, e *Election, fn WorkFunc) error {
	if err := n.RunShard(ctx, e.shard, fn); err != nil {
		return fmt.Errorf("election %q: %w", e.name, err)
	}
	return nil
}

// RunShard runs fn every time this node becomes the acting owner of shard
// (for example n.ShardFor("tenant-42")), with the same contract as
// RunLeader.
func (n *Node) RunShard(ctx context.Context, shard uint32, fn WorkFunc) error {
	var lastDone uint64 // epoch whose term fn finished with nil
	for {
		var tok Token
		err := n.waitFor(ctx, func() bool {
			t, err := n.Token(shard)
			if err != nil || (lastDone != 0 && t.Epoch == lastDone) {
				return false
			}
			tok = t
			return true
		})
		if err != nil {
			return err
		}
		finished, err := n.runTerm(ctx, tok, fn)
		if err != nil {
			return err
		}
		if finished {
			lastDone = tok.Epoch
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
}

// workerStarting runs on a worker's goroutine before fn; tests replace it to
// pause the start.
var workerStarting = func() {}

// runTerm runs fn for one ownership term. finished reports that fn returned
// nil while the term was still going; err is fn's own error (not caused by
// the term ending) wrapped with the shard.
//
// fn's context is a workerCtx: it ends when this loop sees the term end
// (ownership moved, the node closes, ctx ends) and, on its own, as soon as
// the lease guard passes by the clock — when fn consults it or when its
// timer fires, whether or not this loop got to run.
func (n *Node) runTerm(ctx context.Context, tok Token, fn WorkFunc) (finished bool, err error) {
	cur, until, terr := n.actingToken(tok.Shard, time.Now())
	if terr != nil || cur != tok {
		return false, nil // the term ended before it started
	}
	wctx := newWorkerCtx(ctx, until, true)
	defer wctx.end(nil)
	n.addActive(tok.Shard)
	defer n.doneActive(tok.Shard)
	done := make(chan error, 1)
	go func() {
		workerStarting()
		// The token was checked before this goroutine ran: a pause in
		// between (GC, preemption, a stopped VM) can outlast the guard.
		// Re-check with a fresh clock so fn never starts on an ended lease.
		// A pause after this check, inside fn, only fencing protects
		// against (docs/guarantees.md).
		if wctx.passed(time.Now()) {
			wctx.expire()
			done <- nil
			return
		}
		done <- fn(wctx, tok)
	}()

	for {
		ch := n.watch()
		now := time.Now()
		cur, until, terr := n.actingToken(tok.Shard, now)
		if terr != nil || cur != tok {
			if wctx.passed(now) {
				wctx.expire()
			} else {
				wctx.end(ErrLostOwnership)
			}
			break
		}
		wctx.setGuard(until)
		select {
		case ferr := <-done:
			switch {
			case ctx.Err() != nil, wctx.Err() != nil:
				// The term ended (fn may have seen the guard pass
				// before this loop did): fn's result is not its own.
				return false, nil
			case ferr != nil:
				return false, fmt.Errorf("shard %d at epoch %d: %w", tok.Shard, tok.Epoch, ferr)
			}
			return true, nil
		case <-ch:
			continue
		case <-wctx.Done():
			// The guard passed (fn or the timer saw it) or ctx ended.
		case <-n.done:
			wctx.end(ErrClosed)
		}
		break
	}
	// The term is over and fn's context is cancelled: wait for fn alone
	// (n.done and ctx.Done stay ready once closed; selecting on them
	// again would spin a core for as long as fn takes to wind down).
	<-done
	return false, nil
}

// RunPerShard runs fn once per shard this node acts on, each in its own
// goroutine, starting it when the node acquires a shard and cancelling its
// context before the node stops acting (handover, lease loss, Close). It
// returns when ctx is done or the node closes (after every fn returned),
// or when one fn returns an error (after cancelling the others). This is
// the fenced, shard-granular form of "N workers split the work": each
// shard's work happens on exactly one node at a time.
func (n *Node) RunPerShard(ctx context.Context, fn WorkFunc) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu       sync.Mutex
		running  = make(map[uint32]bool)
		finished = make(map[uint32]uint64) // shard -> epoch fn finished with nil
		firstErr error
		wg       sync.WaitGroup
	)
	defer wg.Wait()
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel(err)
		}
	}
	for {
		ch := n.watch()
		for _, tok := range n.Owned() {
			mu.Lock()
			start := !running[tok.Shard] && finished[tok.Shard] != tok.Epoch
			if start {
				running[tok.Shard] = true
			}
			mu.Unlock()
			if !start {
				continue
			}
			wg.Add(1)
			go func(tok Token) {
				defer wg.Done()
				ok, err := n.runTerm(ctx, tok, fn)
				mu.Lock()
				delete(running, tok.Shard)
				if ok {
					finished[tok.Shard] = tok.Epoch
				}
				mu.Unlock()
				if err != nil {
					fail(err)
				}
				n.notify()
			}(tok)
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if firstErr != nil {
				return firstErr
			}
			return context.Cause(ctx)
		case <-n.done:
			cancel(ErrClosed)
			wg.Wait()
			return ErrClosed
		case <-ch:
		}
	}
}

// GroupPosition returns this node's index among the committed live members
// of its group (sorted by node id) and their count — Logx's
// GlobalWorkerIndex/GlobalWorkerCount, for code that splits work by
// index. It can change at any moment and two nodes can briefly disagree;
// prefer RunPerShard, whose split is fenced.
func (n *Node) GroupPosition() (index, count int, err error) {
	if n.isClosed() {
		return -1, 0, ErrClosed
	}
	groupOf := make(map[string]string)
	for _, m := range n.be.members() {
		groupOf[m.ID] = m.Group
	}
	var ids []string
	for _, id := range n.be.liveNodes() {
		if groupOf[id] == n.cfg.Group {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for i, id := range ids {
		if id == n.cfg.NodeID {
			return i, len(ids), nil
		}
	}
	return -1, len(ids), ErrNotLive
}
