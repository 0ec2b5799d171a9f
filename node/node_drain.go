// Draining a node: Drain and Undrain, Close's drain (drainForClose), and
// the conditions they wait for.

package node

import (
	"context"
	"fmt"
	"time"
)

// Drain asks the control group to move every shard and election off this
// node (it stays a member and keeps its control-group vote) and returns
// once this node acts on none, or ctx ends. When no other node is eligible
// to take shards over it returns at once (the shards stay here). Workers see their contexts
// cancelled as their shards are handed over, one drain timeout at most
// after the revocation. A drained node gets no shards until Undrain.
func (n *Node) Drain(ctx context.Context) error {
	if n.isClosed() {
		return ErrClosed
	}
	if err := n.be.setDraining(ctx, true); err != nil {
		return fmt.Errorf("node: drain %s: %w", n.cfg.NodeID, err)
	}
	return n.waitFor(ctx, func() bool {
		return (!n.protocolActing() && !n.ownsCommitted()) || n.nowhereToGo()
	})
}

// drainForClose is Close's drain. It hands the shards over like Drain, but
// gives up as soon as no handover is possible: without a control-group
// quorum nothing can be granted to anyone (the shards fail over once their
// leases end, as after a crash), so stopping every node of a cluster at
// once — the last ones without a quorum — returns in about a lease
// instead of waiting out ctx.
func (n *Node) drainForClose(ctx context.Context) error {
	if n.isClosed() {
		return ErrClosed
	}
	if !n.be.control().quorum {
		return nil
	}
	// The draining flag needs a commit; a quorum lost meanwhile must not
	// hold Close until ctx ends.
	cctx, cancel := context.WithTimeout(ctx, 3*n.timing.Lease)
	err := n.be.setDraining(cctx, true)
	cancel()
	if err != nil {
		if ctx.Err() == nil && !n.be.control().quorum {
			return nil
		}
		return fmt.Errorf("node: drain %s: %w", n.cfg.NodeID, err)
	}
	var lostAt time.Time
	return n.waitFor(ctx, func() bool {
		if (!n.protocolActing() && !n.ownsCommitted()) || n.nowhereToGo() {
			return true
		}
		if n.be.control().quorum {
			lostAt = time.Time{}
			return false
		}
		if lostAt.IsZero() {
			lostAt = time.Now()
		}
		return time.Since(lostAt) > n.timing.Lease // no quorum for a lease: nobody can take over
	})
}

// ownsCommitted reports whether the committed table still names this node
// the valid owner of a shard (it has not handed it over yet).
func (n *Node) ownsCommitted() bool {
	for _, rec := range n.be.shards() {
		if rec.Owner == n.cfg.NodeID && rec.State != ShardUnowned && rec.Valid {
			return true
		}
	}
	return false
}

// nowhereToGo reports whether no shard of this node can move on: none is
// being handed over, and no other eligible node is in the scope of any
// shard it owns (any node for a partition; a node of this node's group
// for a group election's shard). A drain with nowhere to go returns at
// once instead of waiting for ctx.
func (n *Node) nowhereToGo() bool {
	anyOther, groupOther := false, false
	for _, c := range n.candidates(func(Member) bool { return false }, "") {
		if c.ID != n.cfg.NodeID && c.Eligible {
			anyOther = true
			groupOther = groupOther || c.Group == n.cfg.Group
		}
	}
	for _, rec := range n.be.shards() {
		if rec.Owner != n.cfg.NodeID || rec.State == ShardUnowned || !rec.Valid {
			continue
		}
		if rec.State == ShardRevoking {
			return false
		}
		// Group elections live on the shards past the partitions.
		other := anyOther
		if rec.Shard >= uint32(n.cfg.Partitions) {
			other = groupOther
		}
		if other {
			return false
		}
	}
	return true
}

// protocolActing reports whether this node may still act on any shard by
// the lease protocol, including revoked shards it has not handed over.
func (n *Node) protocolActing() bool {
	now := time.Now()
	for _, rec := range n.be.shards() {
		if _, ok := n.be.acting(rec.Shard, now); ok {
			return true
		}
	}
	return false
}

// Undrain makes a drained node eligible for shards again.
func (n *Node) Undrain(ctx context.Context) error {
	if n.isClosed() {
		return ErrClosed
	}
	if err := n.be.setDraining(ctx, false); err != nil {
		return fmt.Errorf("node: undrain %s: %w", n.cfg.NodeID, err)
	}
	return nil
}
