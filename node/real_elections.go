package node

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// electionShard declares the group-scoped election (a no-op when it
// exists) and returns its dedicated shard, Partitions+k. The ledger
// assigns k; the planner places the shard only on eligible members of
// group (their group travels in the groupTag gossip tag).
func (b *netBackend) electionShard(ctx context.Context, group, name string) (uint32, error) {
	if e, ok := b.fsm.State().Election(group, name); ok {
		return e.Shard, nil
	}
	// Declaring is idempotent, so a retry after an unknown outcome is safe.
	r, err := b.commitRetry(ctx, ledger.DeclareElection{Group: group, Name: name, Partitions: uint32(b.cfg.Partitions),
		Now: time.Now().UnixNano()}, nil)
	if err != nil {
		return 0, err
	}
	b.loop.Notify()
	return r.Election.Shard, nil
}
