package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// ErrVersionInactive: the feature needs a cluster version the cluster has
// not finalized yet (docs/upgrades.md); nothing was proposed.
var ErrVersionInactive = errors.New("node: the cluster's active version does not allow this yet")

// Pin is an operator's pin: Shard stays on Node while Node is eligible.
type Pin struct {
	Shard  uint32
	Node   string
	Reason string
	At     time.Time
}

// Exclusion is an operator's exclusion: Node owns nothing while it holds.
type Exclusion struct {
	Node   string
	Reason string
	At     time.Time
}

// PlacementRules are the committed operator rules.
type PlacementRules struct {
	Pins     []Pin       // sorted by shard
	Excluded []Exclusion // sorted by node
}

// PlacementRules returns the committed pins and exclusions as this node's
// replica knows them. ErrUnsupported on an in-memory network.
func (n *Node) PlacementRules() (PlacementRules, error) {
	ub, err := n.replica("placement rules")
	if err != nil {
		return PlacementRules{}, err
	}
	st := ub.ledgerState()
	var r PlacementRules
	for _, p := range st.Pins() {
		r.Pins = append(r.Pins, Pin{Shard: p.Shard, Node: p.Node, Reason: p.Reason, At: time.Unix(0, p.At)})
	}
	for _, e := range st.Excluded() {
		r.Excluded = append(r.Excluded, Exclusion{Node: e.Node, Reason: e.Reason, At: time.Unix(0, e.At)})
	}
	return r, nil
}

// PinShard pins shard (a partition, not an election shard) to node, a
// registered node: the control group moves the shard there with a planned
// handoff and keeps it there while node is eligible (alive, healthy, not
// draining or excluded); while it is not, the shard is placed as usual. The
// node sheds another shard to keep the balance; pinned shards are never
// shed. An empty node removes the pin (UnpinShard). reason is shown with
// the pin (at most 4096 bytes). It returns once the rule is committed, not
// once the shard has moved (watch `tenure moves` or Subscribe).
//
// Errors: ErrVersionInactive before cluster version 3
// (ledger.VersionPlacementRules) is finalized; ErrInvalid for a shard out
// of range or an unknown node; ErrNoQuorum; ErrUnsupported on an
// in-memory network.
func (n *Node) PinShard(ctx context.Context, shard uint32, node, reason string) error {
	return n.placementRule(ctx, ledger.PinShard{Shard: shard, Node: node, Reason: reason, Now: time.Now().UnixNano()})
}

// UnpinShard removes shard's pin; the shard stays where it is.
func (n *Node) UnpinShard(ctx context.Context, shard uint32) error {
	return n.PinShard(ctx, shard, "", "")
}

// ExcludeNode excludes node from placement: its shards and elections move
// off with planned handoffs (as for a drain) and it gets none until
// IncludeNode. It keeps its control-group vote. node need not have joined
// yet. Errors as for PinShard.
func (n *Node) ExcludeNode(ctx context.Context, node, reason string) error {
	if node == "" {
		return fmt.Errorf("%w: exclude: empty node id", ErrInvalid)
	}
	return n.placementRule(ctx, ledger.ExcludeNode{Node: node, Exclude: true, Reason: reason, Now: time.Now().UnixNano()})
}

// IncludeNode lifts node's exclusion; it is placed again once it has been
// eligible for the planner's StableFor.
func (n *Node) IncludeNode(ctx context.Context, node string) error {
	if node == "" {
		return fmt.Errorf("%w: include: empty node id", ErrInvalid)
	}
	return n.placementRule(ctx, ledger.ExcludeNode{Node: node, Now: time.Now().UnixNano()})
}

func (n *Node) placementRule(ctx context.Context, c ledger.Command) error {
	ub, err := n.gate(ledger.VersionPlacementRules, "pinning and excluding nodes")
	if err != nil {
		return err
	}
	if pin, ok := c.(ledger.PinShard); ok && int64(pin.Shard) >= int64(n.cfg.Partitions) {
		return fmt.Errorf("%w: pin of shard %d: partitions are 0..%d", ErrInvalid, pin.Shard, n.cfg.Partitions-1)
	}
	r, err := ub.commitCommand(ctx, c)
	if err == nil {
		err = r.Err
	}
	if errors.Is(err, ledger.ErrUnknownNode) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return mapLedgerErr(err)
}
