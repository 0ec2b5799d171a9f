package ledger

import (
	"slices"

	"github.com/tenurehq/tenure/internal/changefeed"
	"github.com/tenurehq/tenure/internal/mutation"
)

// The ownership change feed: which shards each published state changed.
//
// A reader that derives something from every shard (node's refresh and
// events, the metrics sampler) used to redo it over the whole table
// whenever the OwnershipGeneration moved: on a member of a busy cluster
// that was O(shards) per commit (docs/benchmarks.md, "Converging 100
// agents"). The feed lets it re-check only the shards that changed since
// the generation it last saw (State.ShardChangesSince). It is derived in
// apply, in memory only: no log, wire or snapshot change.
//
// A shard "changed" when its record was written (putShard) or when its
// owner's node record changed incarnation or liveness, or appeared or was
// forgotten (putNode, ForgetNode: OwnershipValid of the owner's shards may
// have changed). Table-wide changes (a fenced-takeover policy, an
// election, a pin or exclusion, a revocation, a snapshot restore) mark the
// link "all": a reader crossing it re-reads every shard. The feed keeps at
// most maxFeedShards shard ids and maxFeedLinks links; a reader further
// behind re-reads every shard too.

const (
	maxFeedShards = 8192
	maxFeedLinks  = 1024
)

// feedScratch is what the writer collects between two publishes.
type feedScratch struct {
	shards []uint32
	owners []string
	all    bool
}

func (f *FSM) feedShard(id uint32) { f.feed.shards = append(f.feed.shards, id) }

func (f *FSM) feedOwner(id string) {
	if !mutation.On(mutation.FeedSkipsOwners) {
		f.feed.owners = append(f.feed.owners, id)
	}
}

// feedAll marks the next link table-wide: the shard tables changed in a
// way no list of shards describes (dirtyShards without putShard).
func (f *FSM) feedAll() { f.feed.all = true }

// feedLimits bound the feed (changefeed.Limits).
var feedLimits = changefeed.Limits{IDs: maxFeedShards, Links: maxFeedLinks}

// linkChanges returns the link of the state about to be published at
// generation gen, whose predecessor had generation from, and resets the
// scratch. It runs on the apply goroutine with f.mu held.
func (f *FSM) linkChanges(from, gen uint64) *changefeed.Link {
	sc := &f.feed
	all := sc.all || from == 0
	var shards []uint32
	if !all {
		if len(sc.owners) > 0 {
			// The owners' shards: their validity may have changed. One
			// pass over the table, only on entries that change a node's
			// incarnation or liveness (restarts, expiries, new nodes).
			f.st.shards.Ascend(func(r ShardRecord) bool {
				if r.State != ShardUnowned && r.Owner != "" && slices.Contains(sc.owners, r.Owner) {
					sc.shards = append(sc.shards, r.Shard)
				}
				return true
			})
		}
		slices.Sort(sc.shards)
		shards = slices.Clip(slices.Compact(sc.shards))
		sc.shards = nil
	}
	l := changefeed.Append(f.st.changes, from, gen, shards, all, feedLimits)
	sc.shards, sc.owners, sc.all = sc.shards[:0], sc.owners[:0], false
	return l
}

// ShardChangesSince returns the shards whose record or owner validity may
// differ between the state of OwnershipGeneration since (of this replica)
// and s, sorted and distinct — do not modify the slice — and true; or
// false when s cannot tell (since is older than the feed keeps, of another
// replica, or a table-wide change or a snapshot lies in between): then
// re-read every shard. since equal to s's generation changed nothing.
func (s *State) ShardChangesSince(since uint64) ([]uint32, bool) {
	if since == s.ownership {
		return nil, true
	}
	return s.changes.Since(since)
}
