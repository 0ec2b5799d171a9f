package node

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// shardFeed remembers which shards each move of ShardsGeneration was
// about, so a reader of Shards (the API's metrics sampler) re-reads only
// those (Node.ShardsSince) instead of every shard on every change. It is
// bounded: a reader further behind than it keeps reads Shards again.
type shardFeed struct {
	mu      sync.Mutex
	entries []feedEntry // oldest first, consecutive generations
	ids     int         // shard ids held
}

type feedEntry struct {
	gen    uint64
	all    bool     // a full pass: any shard may have changed
	shards []uint32 // sorted, distinct
}

const (
	maxShardFeedIDs     = 8192
	maxShardFeedEntries = 256
)

// add moves ShardsGeneration (ctr) and records what the refresh that
// moved it re-read: a full pass, or changed and the shards of evs.
func (f *shardFeed) add(ctr *atomic.Uint64, full bool, changed []ShardInfo, evs []Event) {
	e := feedEntry{all: full}
	if !full {
		e.shards = make([]uint32, 0, len(changed)+len(evs))
		for _, r := range changed {
			e.shards = append(e.shards, r.Shard)
		}
		for _, ev := range evs {
			e.shards = append(e.shards, ev.Shard)
		}
		slices.Sort(e.shards)
		e.shards = slices.Compact(e.shards)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	gen := ctr.Add(1)
	e.gen = gen
	if n := len(f.entries); e.all || (n > 0 && f.entries[n-1].gen+1 != gen) {
		f.entries, f.ids = f.entries[:0], 0
	}
	f.entries = append(f.entries, e)
	f.ids += len(e.shards)
	for len(f.entries) > 1 && (len(f.entries) > maxShardFeedEntries || f.ids > maxShardFeedIDs) {
		f.ids -= len(f.entries[0].shards)
		f.entries[0] = feedEntry{}
		f.entries = f.entries[1:]
	}
}

// since returns the shards named by the entries after generation since up
// to the newest, sorted and distinct, and the newest generation; false
// when an entry in between is a full pass or is no longer kept. f.mu held.
func (f *shardFeed) since(since, cur uint64) ([]uint32, bool) {
	if since == cur {
		return nil, true
	}
	n := len(f.entries)
	if since == 0 || n == 0 || f.entries[n-1].gen != cur || f.entries[0].gen > since+1 || since > cur {
		return nil, false
	}
	var out []uint32
	for _, e := range f.entries {
		if e.gen <= since {
			continue
		}
		if e.all {
			return nil, false
		}
		out = append(out, e.shards...)
	}
	slices.Sort(out)
	return slices.Compact(out), true
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
