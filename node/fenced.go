package node

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// ShardRange is the shards First..Last, inclusive.
type ShardRange = ledger.ShardRange

// SetFencedTakeover puts the shards first..last (partitions or election
// shards) under fenced takeover (fenced) or back under the lease rule.
//
// Fenced takeover is for work whose every side effect checks the fencing
// token (Propose, the jobs API, or an external store that compares the
// token): when such a shard's owner is detected dead — the control group
// has not seen its heartbeat for the planner's FencedAfter (3 heartbeat
// periods by default) or gossip reports it dead — the shard is granted to
// a successor at once, without waiting out the owner's lease. The grant
// bumps the epoch, so from then on every write fenced with the old token is
// refused (S2 holds). S4 does NOT hold for these shards: an owner that is
// in fact alive (a pause, a partition, a false suspicion) may still act
// until it learns the new epoch or its lease ends, at the same time as its
// successor; only the token keeps its writes out (docs/guarantees.md). Do
// not opt in for work with side effects that are not fenced.
//
// It returns once the policy is committed. Errors: ErrVersionInactive
// before cluster version 4 (ledger.VersionFencedTakeover) is finalized;
// ErrInvalid for an empty range or shards that do not exist; ErrNoQuorum;
// ErrUnsupported on an in-memory network.
func (n *Node) SetFencedTakeover(ctx context.Context, first, last uint32, fenced bool) error {
	if first > last {
		return fmt.Errorf("%w: fenced takeover for shards %d..%d: first after last", ErrInvalid, first, last)
	}
	return n.gatedRule(ctx, ledger.VersionFencedTakeover, "fenced takeover",
		ledger.SetTakeoverPolicy{First: first, Last: last, Fenced: fenced, Now: time.Now().UnixNano()})
}

// FencedShards returns the shards under fenced takeover, as this node's
// replica knows them: disjoint ranges sorted by First. ErrUnsupported on
// an in-memory network.
func (n *Node) FencedShards() ([]ShardRange, error) {
	ub, err := n.replica("fenced takeover")
	if err != nil {
		return nil, err
	}
	return ub.ledgerState().FencedRanges(), nil
}

// SetFencedTakeover opts the election into fenced takeover (fenced) or out
// of it: its leadership passes to another candidate as soon as the leader
// is detected dead, without waiting out its lease. Two leaders may then act
// at once; only the token (Token, Run's tok) tells the stale one's writes
// apart. See Node.SetFencedTakeover for what this waives and the errors.
// A global election shares its shard with the keys that hash to it: the
// policy covers them too.
func (e *Election) SetFencedTakeover(ctx context.Context, fenced bool) error {
	return e.n.SetFencedTakeover(ctx, e.shard, e.shard, fenced)
}
