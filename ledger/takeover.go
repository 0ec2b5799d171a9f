package ledger

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/mutation"
)

// Fenced takeover (cluster version 4, VersionFencedTakeover): shards whose
// every side effect checks the fencing token may opt out of waiting for a
// dead owner's lease. For a shard under the policy the leader may grant a
// successor (Grant with Takeover set) while the owner's ownership is still
// valid, as soon as it believes the owner dead. S2 still holds — the grant
// is a compare-and-set on the epoch and bumps it, so every write fenced
// with the old owner's epoch is refused from then on — but S4 is waived for
// those shards: the old owner may still believe it owns the shard until its
// lease runs out, so two owners may act at once, and only the fencing
// token keeps the stale one's writes out (docs/guarantees.md).

// VersionFencedTakeover is the cluster version that introduces
// SetTakeoverPolicy and the fenced-takeover grant rule (encoding version
// 6, snapshot version 6). A proposer sends SetTakeoverPolicy only when
// State.VersionActive(VersionFencedTakeover).
const VersionFencedTakeover uint32 = 4

// KindSetTakeoverPolicy is the wire kind of SetTakeoverPolicy (encoding
// version 6).
const KindSetTakeoverPolicy Kind = 21

// encodingFencedTakeover and snapshotFencedTakeover are the encoding and
// snapshot versions that carry the takeover policy.
const (
	encodingFencedTakeover byte = 6
	snapshotFencedTakeover byte = 6
)

// MaxFencedRanges bounds the fenced-takeover policy table (disjoint
// ranges after merging).
const MaxFencedRanges = 4096

// SetTakeoverPolicy puts the shards First..Last (inclusive) under fenced
// takeover (Fenced) or back under the lease rule (!Fenced). Every shard of
// the range must exist: a partition (< the cluster's partition count) or a
// declared election's shard. An election opts in with its own shard as
// First and Last. A change that changes nothing returns Result.Duplicate.
type SetTakeoverPolicy struct {
	First, Last uint32
	Fenced      bool
	Now         int64
}

func (SetTakeoverPolicy) kind() Kind { return KindSetTakeoverPolicy }

func init() {
	register(kindSpec[SetTakeoverPolicy]{
		kind: KindSetTakeoverPolicy, name: "SetTakeoverPolicy", since: encodingFencedTakeover,
		fields: func(cd codec, c SetTakeoverPolicy) SetTakeoverPolicy {
			cd.walk(&c.First, &c.Last, &c.Fenced, &c.Now)
			return c
		},
		apply: func(f *FSM, _ uint64, c SetTakeoverPolicy) Result { return f.setTakeoverPolicy(c) },
		// It waives S4, so an election's fenced option
		// (node.Election.SetFencedTakeover) on a member is refused too: a
		// member would otherwise fence every shard.
		who:       whoOperator,
		authorize: operatorOnly[SetTakeoverPolicy],
		// No sessionNow: a session of a policy change was always
		// remembered at time 0 (replicated state).
	})
}

// ShardRange is the shards First..Last, inclusive.
type ShardRange struct {
	First, Last uint32
}

// Contains reports whether shard is in r.
func (r ShardRange) Contains(shard uint32) bool { return r.First <= shard && shard <= r.Last }

// FencedRanges returns the shards under fenced takeover: disjoint,
// non-adjacent ranges sorted by First.
func (s *State) FencedRanges() []ShardRange { return slices.Clone(s.fenced) }

// Fenced reports whether shard is under fenced takeover.
func (s *State) Fenced(shard uint32) bool { return rangesContain(s.fenced, shard) }

func rangesContain(rs []ShardRange, shard uint32) bool {
	i, _ := slices.BinarySearchFunc(rs, shard, func(r ShardRange, s uint32) int {
		switch {
		case r.Last < s:
			return -1
		case r.First > s:
			return 1
		}
		return 0
	})
	return i < len(rs) && rs[i].Contains(shard)
}

// withRange returns rs with r added (fenced) or removed, merged and
// sorted. rs is not modified: a published State may share it.
func withRange(rs []ShardRange, r ShardRange, fenced bool) []ShardRange {
	out := make([]ShardRange, 0, len(rs)+2)
	for _, x := range rs {
		if x.Last < r.First || x.First > r.Last {
			out = append(out, x)
			continue
		}
		if fenced {
			r.First, r.Last = min(r.First, x.First), max(r.Last, x.Last)
			continue
		}
		if x.First < r.First {
			out = append(out, ShardRange{x.First, r.First - 1})
		}
		if x.Last > r.Last {
			out = append(out, ShardRange{r.Last + 1, x.Last})
		}
	}
	if fenced {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ShardRange) int { return cmp.Compare(a.First, b.First) })
	// Merge adjacent ranges so one set of shards has one form.
	merged := out[:0]
	for _, x := range out {
		if n := len(merged); n > 0 && uint64(merged[n-1].Last)+1 >= uint64(x.First) {
			merged[n-1].Last = max(merged[n-1].Last, x.Last)
			continue
		}
		merged = append(merged, x)
	}
	return merged
}

// shardLimit is one past the largest shard id that exists: the partitions
// and the declared elections' shards (0 before any partition count is
// recorded).
func (s *State) shardLimit() uint64 {
	parts := s.cluster.Partitions
	if parts == 0 {
		parts = s.partitions
	}
	if parts == 0 {
		return 0
	}
	return uint64(parts) + uint64(s.elections.Len())
}

func (f *FSM) setTakeoverPolicy(c SetTakeoverPolicy) Result {
	limit := f.st.shardLimit()
	switch {
	case !f.st.VersionActive(VersionFencedTakeover) && !mutation.On(mutation.GatedWhileMixed):
		return Result{Err: errf(ErrVersion, "takeover policy needs cluster version %d, the cluster runs %d", VersionFencedTakeover, f.st.ActiveVersion())}
	case c.First > c.Last:
		return Result{Err: errf(ErrInvalid, "takeover policy for shards %d..%d: first after last", c.First, c.Last)}
	case limit == 0:
		return Result{Err: errf(ErrInvalid, "takeover policy for shards %d..%d: the cluster has not recorded its partition count yet", c.First, c.Last)}
	case uint64(c.Last) >= limit:
		return Result{Err: errf(ErrInvalid, "takeover policy for shards %d..%d: shards are 0..%d (partitions and declared elections)", c.First, c.Last, limit-1)}
	}
	next := withRange(f.st.fenced, ShardRange{c.First, c.Last}, c.Fenced)
	switch {
	case slices.Equal(next, f.st.fenced):
		return Result{Duplicate: true}
	case len(next) > MaxFencedRanges:
		return Result{Err: errf(ErrTooLarge, "takeover policy for shards %d..%d: %d ranges (at most %d)", c.First, c.Last, len(next), MaxFencedRanges)}
	}
	if len(next) == 0 {
		next = nil
	}
	f.st.fenced = next
	f.dirty |= dirtyShards
	f.feedAll()
	return Result{}
}

// fencedTakeover reports whether a Grant may replace rec's still-valid
// owner: a takeover of a shard under the fenced policy.
func (f *FSM) fencedTakeover(c Grant, rec ShardRecord) bool {
	return c.Takeover && rec.State == ShardOwned && (f.st.Fenced(c.Shard) || mutation.On(mutation.FencedTakeoverUnfenced))
}

// encodeFencedSection writes the snapshot's policy table (snapshot
// version 6).
func encodeFencedSection(w *writer, st *State) {
	w.u(uint64(len(st.fenced)))
	for _, r := range st.fenced {
		w.u(uint64(r.First))
		w.u(uint64(r.Last))
	}
}

// decodeFencedSection reads it back, refusing ranges that are empty,
// unsorted, overlapping or adjacent (Encode never writes them).
func decodeFencedSection(r *reader, st *State, count func() uint64) {
	var rs []ShardRange
	for n := count(); n > 0 && r.err == nil; n-- {
		x := ShardRange{First: r.u32(), Last: r.u32()}
		if r.err != nil {
			return
		}
		if x.First > x.Last || (len(rs) > 0 && uint64(rs[len(rs)-1].Last)+1 >= uint64(x.First)) {
			r.fail(fmt.Errorf("%w: snapshot fenced range %d..%d: empty, unsorted or not merged", ErrMalformed, x.First, x.Last))
			return
		}
		rs = append(rs, x)
	}
	st.fenced = rs
}
