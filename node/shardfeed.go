package node

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/changefeed"
)

// shardFeed remembers which shards each move of ShardsGeneration was
// about, so a reader of Shards (the API's metrics sampler) re-reads only
// those (Node.ShardsSince) instead of every shard on every change. It is
// a chain of the same bounded list as the ledger's change feed
// (internal/changefeed): a reader further behind than it keeps reads
// Shards again.
type shardFeed struct {
	mu   sync.Mutex
	head *changefeed.Link // the move to the current ShardsGeneration; nil before the first
}

// shardFeedLimits bound the feed.
var shardFeedLimits = changefeed.Limits{IDs: 8192, Links: 256}

// add moves ShardsGeneration (ctr) and records what the refresh that
// moved it re-read: a full pass, or changed and the shards of evs.
func (f *shardFeed) add(ctr *atomic.Uint64, full bool, changed []ShardInfo, evs []Event) {
	var shards []uint32
	if !full {
		shards = make([]uint32, 0, len(changed)+len(evs))
		for _, r := range changed {
			shards = append(shards, r.Shard)
		}
		for _, ev := range evs {
			shards = append(shards, ev.Shard)
		}
		slices.Sort(shards)
		shards = slices.Clip(slices.Compact(shards))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	gen := ctr.Add(1)
	f.head = changefeed.Append(f.head, gen-1, gen, shards, full, shardFeedLimits)
}

// since returns the shards named by the moves after generation since up
// to cur (the newest), sorted and distinct, and true; false when since is
// 0 (never read) or the feed cannot tell. f.mu held.
func (f *shardFeed) since(since, cur uint64) ([]uint32, bool) {
	switch {
	case since == cur:
		return nil, true
	case since == 0:
		return nil, false
	}
	return f.head.Since(since)
}

// ShardsSince returns ShardsGeneration and, when it can tell, the shards
// whose Shards answer may differ from the one read at generation since
// (in anything but LeaseRemaining), sorted by shard, with true; false
// when it cannot (since is 0, too old, or a full re-read of the table
// lies in between): read Shards then. A reader that keeps a copy of
// Shards updates it from ShardsSince exactly as a fresh Shards would
// read (TestShardsSinceEqualsShards).
func (n *Node) ShardsSince(since uint64) (uint64, []ShardInfo, bool) {
	n.shardFeed.mu.Lock()
	gen := n.shardsGen.Load() // moved only under the feed's lock
	ids, ok := n.shardFeed.since(since, gen)
	n.shardFeed.mu.Unlock()
	if !ok {
		return gen, nil, false
	}
	now := time.Now()
	out := make([]ShardInfo, 0, len(ids))
	for _, s := range ids {
		if rec, found := n.be.shard(s); found {
			out = append(out, n.decorate(rec, now))
		}
	}
	return gen, out, true
}
