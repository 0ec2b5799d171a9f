// Waiting on the node's state: WaitSettled and the waitFor/watch helpers
// that re-evaluate a condition after every state change.

package node

import (
	"context"
	"time"
)

// WaitSettled blocks until every shard has a valid owner and none is being
// revoked, or ctx ends. Tests and examples use it to start from a stable
// placement; production code does not need it.
func (n *Node) WaitSettled(ctx context.Context) error {
	return n.waitFor(ctx, func() bool {
		recs := n.be.shards()
		if len(recs) < n.cfg.Partitions {
			return false
		}
		for _, r := range recs {
			if r.State != ShardOwned || !r.Valid {
				return false
			}
		}
		return true
	})
}

// waitFor re-evaluates cond after every state change until it holds.
func (n *Node) waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(n.timing.RenewEvery)
	defer t.Stop()
	for {
		ch := n.watch()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-n.done:
			return ErrClosed
		case <-ch:
		case <-t.C:
		}
	}
}

// watch returns a channel closed at the next state change.
func (n *Node) watch() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}
