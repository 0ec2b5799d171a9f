package changefeed

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSinceAgainstModel: a chain answers Since exactly as the union of the
// changes after since (when it answers), and always answers for a reader
// within the last link or inside the bounds since the last all.
func TestSinceAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		lim := Limits{IDs: 40, Links: 8}
		var head *Link
		var hist [][]uint32 // hist[g-1]: ids of the change to generation g; nil: all
		for gen := uint64(1); gen <= 300; gen++ {
			all := r.IntN(30) == 0
			var ids []uint32
			if !all {
				for range r.IntN(6) {
					ids = append(ids, uint32(r.IntN(50)))
				}
				slices.Sort(ids)
				ids = slices.Compact(ids)
				if ids == nil {
					ids = []uint32{}
				}
			}
			head = Append(head, gen-1, gen, ids, all, lim)
			hist = append(hist, ids)
			for since := uint64(0); since < gen; since++ {
				got, ok := head.Since(since)
				var want []uint32
				crossesAll := false
				for g := since + 1; g <= gen; g++ {
					if hist[g-1] == nil {
						crossesAll = true
					}
					want = append(want, hist[g-1]...)
				}
				slices.Sort(want)
				want = slices.Compact(want)
				if ok && (crossesAll || !slices.Equal(got, want)) {
					t.Fatalf("seed %d gen %d: Since(%d) = %v, true; want %v (crosses an all: %v)", seed, gen, since, got, want, crossesAll)
				}
				if !ok && since == gen-1 && !all {
					t.Fatalf("seed %d gen %d: Since(%d) = false for the last link", seed, gen, since)
				}
			}
		}
	}
}

// TestAppendBounds: a chain never holds more than its limits.
func TestAppendBounds(t *testing.T) {
	lim := Limits{IDs: 10, Links: 3}
	var head *Link
	for gen := uint64(1); gen <= 50; gen++ {
		head = Append(head, gen-1, gen, []uint32{uint32(gen), uint32(gen + 100)}, false, lim)
		n, ids := 0, 0
		for l := head; l != nil; l = l.prev {
			n++
			ids += len(l.ids)
		}
		if n > lim.Links || ids > lim.IDs {
			t.Fatalf("gen %d: %d links, %d ids held; limits %+v", gen, n, ids, lim)
		}
	}
}
