package ring

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// greedyBySort is placeOrphans as Assign's documentation states it: sort
// every (shard, member-with-room) pair by score, take them in order.
func greedyBySort(orphans []uint32, owner, avoid []int32, load, quota []int, seeds []uint64) {
	var room []int32
	for i := range int32(len(seeds)) {
		if load[i] < quota[i] {
			room = append(room, i)
		}
	}
	var pairs []orphanPair
	for _, s := range orphans {
		for _, i := range room {
			pairs = append(pairs, orphanPair{score(seeds[i], s), s, i})
		}
	}
	slices.SortFunc(pairs, func(a, b orphanPair) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.shard, b.shard); c != 0 {
			return c
		}
		return cmp.Compare(a.m, b.m)
	})
	left := len(orphans)
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

// TestPlaceOrphansIsTheSortedGreedy checks the heap placement against the
// greedy over the sorted pairs on random orphan sets, quotas and Avoid
// hints (including seeds that collide, so ties are ordered by shard and
// member).
func TestPlaceOrphansIsTheSortedGreedy(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		n := 1 + rng.IntN(12)
		p := 1 + rng.IntN(60)
		seeds := make([]uint64, n)
		for i := range seeds {
			seeds[i] = memberSeed(string(rune('a' + rng.IntN(n+1)))) // repeats: equal scores
		}
		owner := make([]int32, p)
		avoid := make([]int32, p)
		load := make([]int, n)
		var orphans []uint32
		for s := range p {
			owner[s], avoid[s] = -1, -1
			if rng.IntN(3) == 0 {
				avoid[s] = int32(rng.IntN(n))
			}
			if rng.IntN(2) == 0 {
				owner[s] = int32(rng.IntN(n))
				load[owner[s]]++
			} else {
				orphans = append(orphans, uint32(s))
			}
		}
		// Quotas sum to p with every member at or above its load.
		quota := slices.Clone(load)
		for range len(orphans) {
			quota[rng.IntN(n)]++
		}
		o1, l1 := slices.Clone(owner), slices.Clone(load)
		o2, l2 := slices.Clone(owner), slices.Clone(load)
		placeOrphans(orphans, o1, avoid, l1, quota, seeds)
		greedyBySort(orphans, o2, avoid, l2, quota, seeds)
		if !slices.Equal(o1, o2) {
			t.Fatalf("seed %d (%d members, %d shards): heap placement\n%v\nwant (sorted greedy)\n%v", seed, n, p, o1, o2)
		}
		for s, o := range o1 {
			if o < 0 {
				t.Fatalf("seed %d: shard %d left unplaced", seed, s)
			}
		}
	}
}
