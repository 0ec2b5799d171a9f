package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// L2's oracle for Assign that does not use Assign's own arithmetic: on
// small instances, an exhaustive search over every placement of P shards
// on N members finds the fewest moves any balanced placement (every load
// ⌊P/N⌋ or ⌈P/N⌉) needs from the previous one, and Assign's result must be
// balanced and, for a single join or leave from a balanced placement, move
// at most one shard more than that optimum (the rounding: which members
// get ⌈P/N⌉ is fixed by name, so that a join never raises an existing
// member's quota). For any previous placement, Assign keeps on every
// member as many of its shards as the member's new load allows.
func TestAssignMovesExhaustive(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	seed := uint64(26)
	r := rand.New(rand.NewPCG(seed, 1))
	for parts := 1; parts <= 7; parts++ {
		for n := 1; n <= 4; n++ {
			members := names[:n]
			base, err := Assign(Placement{Partitions: parts, Members: members})
			if err != nil {
				t.Fatal(err)
			}
			checkQuotaLoads(t, "initial", parts, members, base)
			// One join, and each possible leave.
			cases := [][]string{names[:n+1]}
			for i := range members {
				var rest []string
				rest = append(rest, members[:i]...)
				rest = append(rest, members[i+1:]...)
				if len(rest) > 0 {
					cases = append(cases, rest)
				}
			}
			for _, next := range cases {
				res, err := Assign(Placement{Partitions: parts, Members: next, Prev: base})
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("P=%d %v -> %v", parts, members, next)
				checkQuotaLoads(t, what, parts, next, res)
				if got, opt := movesBetween(base, res), optimalMoves(parts, next, base); got > opt+1 {
					t.Errorf("%s: %d moves, the optimum is %d (prev %v, got %v)", what, got, opt, base, res)
				}
			}
			// Arbitrary previous placements (seed printed on failure).
			for range 50 {
				prev := make([]string, parts)
				for s := range prev {
					prev[s] = names[r.IntN(len(names))] // some are not members
				}
				res, err := Assign(Placement{Partitions: parts, Members: members, Prev: prev})
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("seed %d: P=%d %v from %v", seed, parts, members, prev)
				checkQuotaLoads(t, what, parts, members, res)
				if got, want := kept(prev, res), keepable(prev, res, members); got != want {
					t.Errorf("%s: kept %d shards in place, the new loads allow %d (got %v)", what, got, want, res)
				}
			}
		}
	}
}

func checkQuotaLoads(t *testing.T, what string, parts int, members, owners []string) {
	t.Helper()
	n := len(members)
	lo, hi := parts/n, (parts+n-1)/n
	load := map[string]int{}
	for _, o := range owners {
		load[o]++
	}
	for _, m := range members {
		if load[m] < lo || load[m] > hi {
			t.Errorf("%s: %s owns %d shards, want %d..%d (%v)", what, m, load[m], lo, hi, owners)
		}
		delete(load, m)
	}
	if len(load) > 0 {
		t.Errorf("%s: shards on non-members %v (%v)", what, load, owners)
	}
}

func movesBetween(prev, next []string) int {
	m := 0
	for s := range next {
		if prev[s] != next[s] {
			m++
		}
	}
	return m
}

func kept(prev, next []string) int { return len(next) - movesBetween(prev, next) }

// keepable is how many shards can stay put given next's loads: every
// member keeps at most min(its previous shards, its new load).
func keepable(prev, next []string, members []string) int {
	before, after := map[string]int{}, map[string]int{}
	for s := range next {
		before[prev[s]]++
		after[next[s]]++
	}
	k := 0
	for _, m := range members {
		k += min(before[m], after[m])
	}
	return k
}

// optimalMoves is the fewest moves from prev to any balanced placement of
// parts shards on members, by trying every placement.
func optimalMoves(parts int, members, prev []string) int {
	n := len(members)
	lo, hi := parts/n, (parts+n-1)/n
	best := parts
	owners := make([]string, parts)
	load := make([]int, n)
	var rec func(s, movesSoFar int)
	rec = func(s, movesSoFar int) {
		if movesSoFar >= best {
			return
		}
		if s == parts {
			for _, l := range load {
				if l < lo || l > hi {
					return
				}
			}
			best = movesSoFar
			return
		}
		for i, m := range members {
			if load[i] == hi {
				continue
			}
			load[i]++
			owners[s] = m
			d := 0
			if prev[s] != m {
				d = 1
			}
			rec(s+1, movesSoFar+d)
			load[i]--
		}
	}
	rec(0, 0)
	return best
}
