package ring

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// summaries is what gossip carries from true per-shard loads: each
// member's total and its top k shards.
func summaries(owners []string, members []string, loads []float64, k int) (map[string]float64, map[string][]ShardLoad) {
	totals := map[string]float64{}
	hot := map[string][]ShardLoad{}
	for _, m := range members {
		totals[m] = 0
	}
	for s, o := range owners {
		totals[o] += loads[s]
		hot[o] = append(hot[o], ShardLoad{uint32(s), loads[s]})
	}
	for m, h := range hot {
		slices.SortStableFunc(h, func(a, b ShardLoad) int {
			switch {
			case a.Load > b.Load:
				return -1
			case a.Load < b.Load:
				return 1
			}
			return 0
		})
		hot[m] = h[:min(k, len(h))]
	}
	return totals, hot
}

func maxRatio(totals map[string]float64, weights map[string]int, members []string) float64 {
	var sum, w float64
	for _, m := range members {
		sum += totals[m]
		w += float64(max(weights[m], 1))
	}
	best := 0.0
	for _, m := range members {
		best = max(best, totals[m]/(sum*float64(max(weights[m], 1))/w))
	}
	return best
}

// TestLoadSwapProp: on a settled placement with a few hot shards (cold
// shards all weigh 1, so the gossiped summaries are exact), repeated swaps
// keep every member at its quota (Assign moves nothing), never raise the
// most loaded member's ratio, never return to an earlier placement (no
// flapping), and end within a bounded number of swaps.
func TestLoadSwapProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 12).Draw(t, "members")
		p := rapid.IntRange(n*2, 200).Draw(t, "partitions")
		members := make([]string, n)
		weights := map[string]int{}
		for i := range members {
			members[i] = fmt.Sprintf("m%d", i)
			weights[members[i]] = rapid.IntRange(1, 3).Draw(t, "weight")
		}
		loads := make([]float64, p)
		for s := range loads {
			loads[s] = 1
		}
		hotN := rapid.IntRange(1, 5).Draw(t, "hot shards")
		for range hotN {
			loads[rapid.IntRange(0, p-1).Draw(t, "hot")] = float64(rapid.IntRange(2, 60).Draw(t, "hot load"))
		}
		pl := Placement{Partitions: p, Members: members, Weights: weights}
		owners := mustAssign(t, pl)
		seen := map[string]bool{fmt.Sprint(owners): true}
		prevMax := -1.0
		for step := range 3 * p {
			totals, hot := summaries(owners, members, loads, 5)
			cur := maxRatio(totals, weights, members)
			if prevMax >= 0 && cur > prevMax+1e-9 {
				t.Fatalf("step %d: max load ratio rose %.3f → %.3f", step, prevMax, cur)
			}
			prevMax = cur
			sw, ok := LoadSwap(LoadView{Owners: owners, Members: members, Weights: weights, Totals: totals, Hot: hot, Threshold: 0.25, MinGain: 0.05})
			if !ok {
				return
			}
			if owners[sw.Hot] != sw.From || owners[sw.Back] != sw.To || sw.Hot == sw.Back {
				t.Fatalf("step %d: swap %+v does not match owners", step, sw)
			}
			owners = slices.Clone(owners)
			owners[sw.Hot], owners[sw.Back] = sw.To, sw.From
			if key := fmt.Sprint(owners); seen[key] {
				t.Fatalf("step %d: swap %+v returns to an earlier placement (flapping)", step, sw)
			} else {
				seen[key] = true
			}
			pl.Prev = owners
			if again := mustAssign(t, pl); !slices.Equal(again, owners) {
				t.Fatalf("step %d: Assign would undo the swap (%d moves)", step, CountMoves(owners, again))
			}
		}
		t.Fatalf("no end after %d swaps", 3*p)
	})
}

func TestLoadSwapNone(t *testing.T) {
	owners := []string{"a", "b", "a", "b"}
	base := LoadView{Owners: owners, Members: []string{"a", "b"}, Threshold: 0.25, MinGain: 0.05}
	for name, v := range map[string]LoadView{
		"balanced":      {Totals: map[string]float64{"a": 10, "b": 9}, Hot: map[string][]ShardLoad{"a": {{0, 6}}}},
		"unknown total": {Totals: map[string]float64{"a": 10}, Hot: map[string][]ShardLoad{"a": {{0, 9}}}},
		"no load":       {Totals: map[string]float64{"a": 0, "b": 0}},
		// One shard carries a's load: moving it would just move the hot
		// spot; the other gains nothing (b's cold shard weighs more).
		"one hot shard": {Totals: map[string]float64{"a": 19.5, "b": 1}, Hot: map[string][]ShardLoad{"a": {{0, 19}, {2, 0.5}}, "b": {{1, 0.4}}}},
		"stale hot":     {Totals: map[string]float64{"a": 20, "b": 2}, Hot: map[string][]ShardLoad{"a": {{1, 10}}}},
	} {
		v.Owners, v.Members, v.Threshold, v.MinGain = base.Owners, base.Members, base.Threshold, base.MinGain
		if sw, ok := LoadSwap(v); ok {
			t.Errorf("%s: swap %+v, want none", name, sw)
		}
	}
	// Two hot shards on a: one moves to b, b gives a cold one back.
	v := base
	v.Totals = map[string]float64{"a": 20, "b": 2}
	v.Hot = map[string][]ShardLoad{"a": {{0, 9}, {2, 11}}, "b": {{1, 1}, {3, 1}}}
	v.Owners = []string{"a", "b", "a", "b", "b"}
	sw, ok := LoadSwap(v)
	if !ok || sw.From != "a" || sw.To != "b" || sw.Hot != 0 || sw.Back != 4 {
		t.Fatalf("swap %+v %v, want s0 a→b and s4 back", sw, ok)
	}
}
