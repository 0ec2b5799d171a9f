package ownership

import (
	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
)

// ObservedSince is the Observed input that brings an agent which last
// observed replica state prev (nil: none yet) up to st, a later state of
// the same replica: st's applied index and active version, every node
// record, and the shard records the ledger's change feed names since
// prev (State.ShardChangesSince) — or every shard record when the feed
// cannot tell (prev nil, prev older than the feed keeps, a table-wide
// change or a snapshot restore in between). With prev == st no shard
// record is included. The node's agent loop feeds its agent with it
// instead of copying the whole table on every commit (docs/benchmarks.md,
// "Converging 100 agents").
//
// Why the agent ends in the very state a full Observed of st would leave
// it in (TestObservedSinceEqualsFull checks it against random command
// sequences; a missed Revoke or Grant would be two acting owners):
//
//   - Every shard record that differs between prev and st is included:
//     the FSM writes shard records only through putShard, which the feed
//     records, or wholesale (a restore, a table-wide change), which the
//     feed marks "all", so ShardChangesSince answers false and every
//     record is included.
//   - A shard record equal to the one the agent observed last changes
//     nothing when observed again (Tracker.ObserveShard is idempotent on
//     it): its own shard keeps its track (same epoch and state: the
//     revokeSeen, drain and resign marks stay), another node's is absent
//     and stays so, the targeted entry is recomputed to what it is. The
//     one difference is a held word for a shard whose unchanged record
//     is already past the word's epoch: a full pass drops it, this input
//     keeps it until the record changes or the word's bound passes
//     (pruneWords, in both) — but such a word never acts: Word refuses
//     one whose shard is targeted at another epoch, so it is held only
//     while the shard is not targeted, and wordChange needs the targeted
//     record, which only a changed record (named, observed, dropping the
//     word: epochs only grow) can bring. It only counts toward
//     MaxHeldWords meanwhile.
//   - Nothing the tracker keeps of a shard depends on another shard's
//     record: shards may be observed in any subset, in order.
//   - What the feed does not mark is passed whole: every node record (the
//     tracker's own record, which decides validity at query time in
//     holds, and the handoff targets, whose Draining flag no feed entry
//     reports), the active version and the applied index. Nodes are
//     observed before shards, as in a full Observed, so a Revoke observed
//     now opens its drain window against the same own record.
//   - The generation of prev names the state whose records the agent
//     holds: the caller passes the state it last fed, so the changes
//     since it are exactly what the agent has not seen.
func ObservedSince(prev, st *ledger.State) Observed {
	in := Observed{Applied: st.AppliedIndex(), Nodes: st.Nodes(), Version: st.ActiveVersion()}
	if prev != nil {
		if changed, ok := st.ShardChangesSince(prev.OwnershipGeneration()); ok {
			if mutation.On(mutation.AgentFeedSkipsChanges) && len(changed) > 1 {
				changed = changed[:1]
			}
			in.Shards = make([]ledger.ShardRecord, 0, len(changed))
			for _, s := range changed {
				if r, found := st.Shard(s); found {
					in.Shards = append(in.Shards, r)
				}
			}
			return in
		}
	}
	in.Shards = st.Shards()
	return in
}
