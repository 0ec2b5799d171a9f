package ring

import (
	"cmp"
	"container/heap"
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
	// Weights, optional, is each member's capacity, 1..MaxWeight: quotas
	// are proportional to it. A member missing here, or with 0, weighs 1.
	Weights map[string]int
	// Zones, optional, is each member's zone (failure domain). Shards are
	// apportioned to zones first, in proportion to the zones' total
	// weight, then to the members of each zone, so the shards spread
	// across zones as evenly as the capacities allow. A member missing
	// here is in the zone "".
	Zones map[string]string
	// Pins, optional, names per shard the member the shard must be on (an
	// operator's pin). It is honoured while that member is in Members
	// (else the shard is placed as usual); a pinned shard is never shed
	// and its member's quota is raised to at least its pin count.
	Pins []string
}

// MaxWeight bounds Placement.Weights.
const MaxWeight = 1 << 16

// Quotas returns how many shards each of members gets from Assign over
// partitions shards: floor(P/N) or ceil(P/N), the extra shard going to the
// P mod N members with the lowest xxhash of their name (ties: name). The
// ranking does not depend on the other members, so a join never raises an
// existing member's quota and a leave never lowers one: that is what
// keeps a single join or leave at the optimal number of moves. Names must
// be unique; the result is keyed by name. It is PlacementQuotas without
// weights, zones or pins.
func Quotas(partitions int, members []string) map[string]int {
	return PlacementQuotas(Placement{Partitions: partitions, Members: members})
}

// PlacementQuotas returns how many shards each member gets from Assign(pl)
// (see Assign, rule 1), keyed by name. pl must be valid (Assign's errors).
func PlacementQuotas(pl Placement) map[string]int {
	names := slices.Clone(pl.Members)
	slices.Sort(names)
	pins := pinCounts(pl, names)
	q := quotas(pl.Partitions, names, weightsOf(pl, names), zonesOf(pl, names), pins)
	m := make(map[string]int, len(names))
	for i, n := range names {
		m[n] = q[i]
	}
	return m
}

func weightsOf(pl Placement, names []string) []int64 {
	w := make([]int64, len(names))
	for i, n := range names {
		w[i] = int64(max(pl.Weights[n], 1))
	}
	return w
}

func zonesOf(pl Placement, names []string) []string {
	z := make([]string, len(names))
	for i, n := range names {
		z[i] = pl.Zones[n]
	}
	return z
}

// pinCounts counts, per sorted name, the shards pinned to it.
func pinCounts(pl Placement, names []string) []int {
	c := make([]int, len(names))
	if len(pl.Pins) == 0 {
		return c
	}
	for _, pin := range pl.Pins[:min(len(pl.Pins), pl.Partitions)] {
		if i, ok := slices.BinarySearch(names, pin); ok && pin != "" {
			c[i]++
		}
	}
	return c
}

// quotas is PlacementQuotas over sorted names, indexed like names: the
// partitions are apportioned to the zones by zone weight, then within each
// zone to its members by weight (apportion), with pins as lower bounds.
// Without weights, zones or pins that is floor(P/N) or ceil(P/N), the
// extra shards to the lowest rank hashes.
func quotas(partitions int, names []string, weights []int64, zones []string, pins []int) []int {
	n := len(names)
	q := make([]int, n)
	if n == 0 {
		return q
	}
	zoneNames := slices.Clone(zones)
	slices.Sort(zoneNames)
	zoneNames = slices.Compact(zoneNames)
	zw := make([]int64, len(zoneNames))
	zpins := make([]int, len(zoneNames))
	zh := make([]uint64, len(zoneNames))
	zoneOf := make([]int, n)
	for i := range names {
		z, _ := slices.BinarySearch(zoneNames, zones[i])
		zoneOf[i] = z
		zw[z] += weights[i]
		zpins[z] += pins[i]
	}
	for z, name := range zoneNames {
		zh[z] = xxhash.Sum64String("zone/" + name + "/rank")
	}
	zq := apportion(partitions, zw, rankOrder(zh, zoneNames), zpins)
	for z := range zoneNames {
		var idx []int
		for i := range names {
			if zoneOf[i] == z {
				idx = append(idx, i)
			}
		}
		w := make([]int64, len(idx))
		h := make([]uint64, len(idx))
		nm := make([]string, len(idx))
		fl := make([]int, len(idx))
		for k, i := range idx {
			w[k], h[k], nm[k], fl[k] = weights[i], rankHash(names[i]), names[i], pins[i]
		}
		mq := apportion(zq[z], w, rankOrder(h, nm), fl)
		for k, i := range idx {
			q[i] = mq[k]
		}
	}
	return q
}

// rankOrder returns the indexes of h sorted by hash, ties by name.
func rankOrder(h []uint64, names []string) []int {
	rank := make([]int, len(h))
	for i := range rank {
		rank[i] = i
	}
	slices.SortFunc(rank, func(a, b int) int {
		if c := cmp.Compare(h[a], h[b]); c != 0 {
			return c
		}
		return cmp.Compare(names[a], names[b])
	})
	return rank
}

// apportion splits total among items in proportion to weights (all > 0):
// each gets floor(total·w/W), and the remaining (fewer than the items) go
// one each to the items first in rank among those whose share is not a
// whole number (so every share is rounded down or up, never beyond). An item whose share falls below
// its floor gets the floor and the rest is apportioned again among the
// others (water-filling). Σ floors ≤ total is the caller's promise. Each
// share is within one shard of total·w/W when no floor binds.
func apportion(total int, weights []int64, rank []int, floors []int) []int {
	n := len(weights)
	q := make([]int, n)
	fixed := make([]bool, n)
	for {
		t, w := int64(total), int64(0)
		for i := range n {
			if fixed[i] {
				t -= int64(floors[i])
			} else {
				w += weights[i]
			}
		}
		if w == 0 {
			return q
		}
		sum := int64(0)
		frac := make([]bool, n) // share not a whole number
		for i := range n {
			if !fixed[i] {
				q[i] = int(t * weights[i] / w)
				frac[i] = t*weights[i]%w != 0
				sum += int64(q[i])
			}
		}
		// The extras go to items whose share has a fraction (there are
		// at least as many as extras), first in rank: no item gets more
		// than its share rounded up.
		extra := t - sum
		for pass := 0; pass < 2 && extra > 0; pass++ {
			for _, i := range rank {
				if extra == 0 {
					break
				}
				if !fixed[i] && (frac[i] || pass == 1) && q[i] == int(t*weights[i]/w) {
					q[i]++
					extra--
				}
			}
		}
		changed := false
		for i := range n {
			if !fixed[i] && q[i] < floors[i] {
				fixed[i], q[i], changed = true, floors[i], true
			}
		}
		if !changed {
			return q
		}
	}
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
//  1. Quotas: every member gets exactly PlacementQuotas(pl)[m] shards.
//     Without weights, zones or pins that is Quotas(P, Members): max − min
//     ≤ 1 (max/avg ≤ ceil(P/N)/(P/N), min/avg ≥ floor(P/N)/(P/N)). With
//     weights, P is apportioned to the zones by their total weight, then
//     to each zone's members by weight (largest shares first, extras by
//     rank hash), so a member's quota is within 2 shards of P·w/W (within
//     1 without zones), and a zone's within 1 of P·Wzone/W; a member's
//     quota is at least the number of shards pinned to it.
//  2. Pins: a shard pinned to a member goes there and is never shed.
//     Keep: any other shard stays with its Prev owner if that owner is a
//     member.
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
// below quota scores the K·D pairs once and keeps each orphan's best pair
// in a heap (placeOrphans), without sorting them.
//
// Errors: Partitions out of range (ErrInvalidConfig), an empty member name
// or a weight outside 0..MaxWeight (ErrInvalidMember), a repeated name
// (ErrDuplicateMember).
func Assign(pl Placement) ([]string, error) {
	p := pl.Partitions
	if p < 1 || p > MaxPartitions {
		return nil, fmt.Errorf("%w: Partitions = %d, want 1..%d", ErrInvalidConfig, p, MaxPartitions)
	}
	names, err := sortedNames(pl.Members)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if w := pl.Weights[n]; w < 0 || w > MaxWeight {
			return nil, fmt.Errorf("%w: %q has weight %d, want 1..%d (0 = 1)", ErrInvalidMember, n, w, MaxWeight)
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
	quota := quotas(p, names, weightsOf(pl, names), zonesOf(pl, names), pinCounts(pl, names))

	owner := make([]int32, p)
	avoid := make([]int32, p)
	pinned := make([]bool, p)
	load := make([]int, n)
	for s := range p {
		owner[s], avoid[s] = -1, -1
		if s < len(pl.Pins) {
			if i, ok := index[pl.Pins[s]]; ok {
				owner[s], pinned[s] = i, true
				load[i]++
				continue
			}
		}
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
				if pinned[a] != pinned[b] { // never shed a pin
					if pinned[a] {
						return 1
					}
					return -1
				}
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
		placeOrphans(orphans, owner, avoid, load, quota, seeds)
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
	ownerChanges(a, b, max(len(a), len(b)), func(int, string, string) { n++ })
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

// placeOrphans gives every orphan shard a member below quota: the greedy
// over all (shard, member-with-room) pairs by descending score (then shard,
// then member), each pair taken if its shard is unplaced and its member has
// room; pass 0 skips a shard's Avoid member, pass 1 places what only it has
// room for. It does not sort the K·D pairs: a heap holds each unplaced
// shard's first pair in that order whose member has room. Members only fill
// up, so when the top pair's member is full every pair before the shard's
// next pair with room is taken or full too, and the first pair with room at
// the top is the one the greedy takes next: O(K·D + K log K), plus O(D) each
// time a shard's best member fills up under it.
func placeOrphans(orphans []uint32, owner, avoid []int32, load, quota []int, seeds []uint64) {
	n := int32(len(seeds))
	var room []int32
	for i := range n {
		if load[i] < quota[i] {
			room = append(room, i)
		}
	}
	left := len(orphans)
	for pass := 0; pass < 2 && left > 0; pass++ {
		// best returns shard s's first pair (highest score, then lowest
		// member) whose member has room, or false.
		best := func(s uint32) (orphanPair, bool) {
			top := orphanPair{shard: s, m: -1}
			for _, i := range room {
				if load[i] >= quota[i] || (pass == 0 && avoid[s] == i) {
					continue
				}
				if sc := score(seeds[i], s); top.m < 0 || sc > top.score {
					top.score, top.m = sc, i
				}
			}
			return top, top.m >= 0
		}
		h := make(orphanHeap, 0, left)
		for _, s := range orphans {
			if owner[s] >= 0 {
				continue
			}
			if pr, ok := best(s); ok {
				h = append(h, pr)
			}
		}
		heap.Init(&h)
		for len(h) > 0 && left > 0 {
			pr := h[0]
			if load[pr.m] >= quota[pr.m] {
				if next, ok := best(pr.shard); ok {
					h[0] = next
					heap.Fix(&h, 0)
				} else {
					heap.Pop(&h)
				}
				continue
			}
			heap.Pop(&h)
			owner[pr.shard] = pr.m
			load[pr.m]++
			left--
		}
	}
}

// orphanPair is one (shard, member) pair of placeOrphans with its score.
type orphanPair struct {
	score uint64
	shard uint32
	m     int32
}

// orphanHeap orders pairs as the greedy takes them: score descending, then
// shard, then member ascending.
type orphanHeap []orphanPair

func (h orphanHeap) Len() int { return len(h) }
func (h orphanHeap) Less(a, b int) bool {
	x, y := h[a], h[b]
	if x.score != y.score {
		return x.score > y.score
	}
	if x.shard != y.shard {
		return x.shard < y.shard
	}
	return x.m < y.m
}
func (h orphanHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *orphanHeap) Push(x any)   { *h = append(*h, x.(orphanPair)) }
func (h *orphanHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
