package ring

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Placement is the input of Assign: the members that may own shards and the
// current owner of every shard.
type Placement struct {
	// Partitions is the number of shards P, 1 ≤ P ≤ MaxPartitions.
	Partitions int
	// Members are the eligible members: non-empty, unique names, in any
	// order. With none, every shard's owner is "".
	Members []string
	// Prev is the current owner of each shard (index = shard); "" for none.
	// It may be shorter than Partitions (the rest count as ""); entries
	// beyond Partitions are ignored, as are owners that are not Members.
	Prev []string
	// Avoid, optional, names per shard a member that should not get the
	// shard while another can take it (a resignation, ledger AvoidOwner).
	// A shard whose Prev owner is its Avoid member is placed anew; a shard
	// with a hint is never chosen as a member's excess and never placed on
	// its Avoid member unless no other member has room for it.
	Avoid []string
}

// Quotas returns how many shards each of members gets from Assign over
// partitions shards: floor(P/N) or ceil(P/N), the extra shard going to the
// P mod N members with the lowest xxhash of their name (ties: name). The
// ranking does not depend on the other members, so a join never raises an
// existing member's quota and a leave never lowers one: that is what
// keeps a single join or leave at the optimal number of moves. Names must
// be unique; the result is keyed by name.
func Quotas(partitions int, members []string) map[string]int {
	names := slices.Clone(members)
	slices.Sort(names)
	q := quotas(partitions, names)
	m := make(map[string]int, len(names))
	for i, n := range names {
		m[n] = q[i]
	}
	return m
}

// quotas is Quotas over sorted names, indexed like names.
func quotas(partitions int, names []string) []int {
	n := len(names)
	q := make([]int, n)
	if n == 0 {
		return q
	}
	lo, extra := partitions/n, partitions%n
	rank := make([]int, n)
	h := make([]uint64, n)
	for i, name := range names {
		rank[i] = i
		h[i] = rankHash(name)
	}
	slices.SortFunc(rank, func(a, b int) int {
		if c := cmp.Compare(h[a], h[b]); c != 0 {
			return c
		}
		return cmp.Compare(names[a], names[b])
	})
	for k, i := range rank {
		q[i] = lo
		if k < extra {
			q[i]++
		}
	}
	return q
}

// rankHash orders members for the extra shard of Quotas.
func rankHash(name string) uint64 { return xxhash.Sum64String(name + "/rank") }

// memberSeed seeds the rendezvous score of a member.
func memberSeed(name string) uint64 { return xxhash.Sum64String(name + memberKeySuffix) }

// Assign returns the owner of every shard (index = shard) for pl's members,
// moving as few shards as possible from pl.Prev. It is pure and
// deterministic: the result depends on the set of members, not their order.
//
// Rules, in order:
//
//  1. Quotas: every member gets exactly Quotas(P, Members)[m] shards, so
//     max − min ≤ 1 (max/avg ≤ ceil(P/N)/(P/N), min/avg ≥ floor(P/N)/(P/N)).
//  2. Keep: a shard stays with its Prev owner if that owner is a member.
//  3. Excess: a member holding more than its quota gives up the shards it
//     ranks lowest (rendezvous score, below); shards with an Avoid hint go
//     last.
//  4. Orphans (shards without a member owner, and the excess) go to members
//     below quota, greedily by rendezvous score over all (shard, member)
//     pairs, highest first: each shard goes as high in its own preference
//     list (its "ring order") as the members with room allow.
//
// Properties (ring/assign_test.go checks them with rapid): the result is a
// fixed point (Assign of it returns it unchanged); a single join or leave
// moves exactly the joiner's quota or the leaver's shards (the optimum,
// ±1 for rounding); and for any membership change, re-running Assign on any
// intermediate state — each shard at its Prev owner, at its new owner or
// unowned — returns the same result, so a planner that applies the moves
// over several rounds, or a new leader that recomputes halfway, never moves
// a shard twice for one change. (With Avoid hints the last property is not
// guaranteed.)
//
// The rendezvous (highest random weight) score of (member, shard) is a
// splitmix64 mix of xxhash(member) and the shard; a shard's preference list
// is the members by descending score. It depends on nothing else, so a
// member joining or leaving does not reorder the others.
//
// Cost: O(P + N log N) when nothing moves; placing K orphans with D members
// below quota sorts K·D pairs (P = 4096, N = 200 from scratch: ~0.1 s).
//
// Errors: Partitions out of range (ErrInvalidConfig), an empty member name
// (ErrInvalidMember), a repeated name (ErrDuplicateMember).
func Assign(pl Placement) ([]string, error) {
	p := pl.Partitions
	if p < 1 || p > MaxPartitions {
		return nil, fmt.Errorf("%w: Partitions = %d, want 1..%d", ErrInvalidConfig, p, MaxPartitions)
	}
	names := slices.Clone(pl.Members)
	slices.Sort(names)
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("%w: empty member name", ErrInvalidMember)
		}
		if i > 0 && names[i-1] == n {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateMember, n)
		}
	}
	out := make([]string, p)
	n := len(names)
	if n == 0 {
		return out, nil
	}
	index := make(map[string]int32, n)
	seeds := make([]uint64, n)
	for i, name := range names {
		index[name] = int32(i)
		seeds[i] = memberSeed(name)
	}
	quota := quotas(p, names)

	owner := make([]int32, p)
	avoid := make([]int32, p)
	load := make([]int, n)
	for s := range p {
		owner[s], avoid[s] = -1, -1
		if s < len(pl.Avoid) {
			if i, ok := index[pl.Avoid[s]]; ok && n > 1 {
				avoid[s] = i
			}
		}
		if s < len(pl.Prev) {
			if i, ok := index[pl.Prev[s]]; ok && i != avoid[s] {
				owner[s] = i
				load[i]++
			}
		}
	}

	// Orphans with a hint go first, to the best-scoring other member with
	// room, else to the best-scoring other member (which then sheds
	// another shard): the resigner gets a different shard instead.
	for s := range p {
		if owner[s] >= 0 || avoid[s] < 0 {
			continue
		}
		best, bestRoom := int32(-1), int32(-1)
		for i := range int32(n) {
			if i == avoid[s] {
				continue
			}
			sc := score(seeds[i], uint32(s))
			if best < 0 || sc > score(seeds[best], uint32(s)) {
				best = i
			}
			if load[i] < quota[i] && (bestRoom < 0 || sc > score(seeds[bestRoom], uint32(s))) {
				bestRoom = i
			}
		}
		if bestRoom >= 0 {
			best = bestRoom
		}
		owner[s] = best
		load[best]++
	}

	// Excess: each member over quota gives up its lowest-scoring shards.
	var over []int32
	for i := range int32(n) {
		if load[i] > quota[i] {
			over = append(over, i)
		}
	}
	if len(over) > 0 {
		held := make(map[int32][]uint32, len(over))
		for s, o := range owner {
			if o >= 0 && load[o] > quota[o] {
				held[o] = append(held[o], uint32(s))
			}
		}
		for _, i := range over {
			shards := held[i]
			slices.SortFunc(shards, func(a, b uint32) int {
				ha, hb := avoid[a] >= 0, avoid[b] >= 0
				if ha != hb {
					if ha {
						return 1
					}
					return -1
				}
				if c := cmp.Compare(score(seeds[i], a), score(seeds[i], b)); c != 0 {
					return c
				}
				return cmp.Compare(a, b)
			})
			for _, s := range shards[:load[i]-quota[i]] {
				owner[s] = -1
			}
			load[i] = quota[i]
		}
	}

	// Orphans: greedy over (shard, member-with-room) pairs by score.
	var orphans []uint32
	for s, o := range owner {
		if o < 0 {
			orphans = append(orphans, uint32(s))
		}
	}
	if len(orphans) > 0 {
		var room []int32
		for i := range int32(n) {
			if load[i] < quota[i] {
				room = append(room, i)
			}
		}
		type pair struct {
			score uint64
			shard uint32
			m     int32
		}
		pairs := make([]pair, 0, len(orphans)*len(room))
		for _, s := range orphans {
			for _, i := range room {
				pairs = append(pairs, pair{score(seeds[i], s), s, i})
			}
		}
		slices.SortFunc(pairs, func(a, b pair) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			if c := cmp.Compare(a.shard, b.shard); c != 0 {
				return c
			}
			return cmp.Compare(a.m, b.m)
		})
		left := len(orphans)
		// Pass 0 skips a shard's Avoid member; pass 1 places what only it
		// has room for.
		for pass := 0; pass < 2 && left > 0; pass++ {
			for _, pr := range pairs {
				if owner[pr.shard] >= 0 || load[pr.m] >= quota[pr.m] || (pass == 0 && avoid[pr.shard] == pr.m) {
					continue
				}
				owner[pr.shard] = pr.m
				load[pr.m]++
				if left--; left == 0 {
					break
				}
			}
		}
	}
	for s, o := range owner {
		out[s] = names[o]
	}
	return out, nil
}

// CountMoves returns the number of shards whose owner differs between a and
// b (a shard missing from the shorter slice has owner "").
func CountMoves(a, b []string) int {
	n := 0
	for s := range max(len(a), len(b)) {
		var x, y string
		if s < len(a) {
			x = a[s]
		}
		if s < len(b) {
			y = b[s]
		}
		if x != y {
			n++
		}
	}
	return n
}

// Loads counts the shards of each member in an assignment; every member
// is present, possibly with 0. Owners that are not members are ignored.
func Loads(assignment []string, members []string) map[string]int {
	m := make(map[string]int, len(members))
	for _, n := range members {
		m[n] = 0
	}
	for _, o := range assignment {
		if _, ok := m[o]; ok {
			m[o]++
		}
	}
	return m
}
