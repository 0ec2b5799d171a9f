package simulation

import (
	"testing"

	"github.com/tenurehq/tenure/ledger"
)

// TestSimFencedSeeds runs random-fault seeds, full length (liveness
// checked), with half the shards under fenced takeover: zero violations —
// S1–S3 and S2's fencing hold for every shard, S4 for the unfenced ones,
// and the placement converges. Some seeds must exercise the waiver (a
// fenced takeover while the old owner still acts), or the test proves
// little.
func TestSimFencedSeeds(t *testing.T) {
	if *flagSeed != 0 || *flagDuration > 0 {
		t.Skip("replaying one seed or running by duration")
	}
	n := 100
	if raceEnabled || testing.Short() {
		n = 30
	}
	mk := func(seed uint64) Config {
		c := DefaultConfig(seed)
		c.Fenced = []ledger.ShardRange{{First: 0, Last: uint32(c.Ownership.Ring.Partitions/2 - 1)}}
		return c
	}
	sum := runSeeds(t, 500_000, n, 0, mk)
	checkSummary(t, sum)
	overlaps := 0
	for seed := uint64(500_000); seed < 500_000+uint64(min(n, 30)); seed++ {
		res, err := Run(mk(seed))
		if err != nil {
			t.Fatal(err)
		}
		overlaps += res.FencedOverlaps
	}
	if overlaps == 0 {
		t.Fatal("no seed ran a fenced takeover while the old owner still acted")
	}
	t.Logf("fenced overlaps (S4 waived) in the first %d seeds: %d", min(n, 30), overlaps)
}
