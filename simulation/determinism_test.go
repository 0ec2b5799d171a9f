package simulation

import (
	"testing"

	"github.com/tenurehq/tenure/internal/mutation"
)

// TestSimDeterminism runs seeds twice and demands byte-identical traces
// (equal hashes of every event and every committed command).
func TestSimDeterminism(t *testing.T) {
	for _, seed := range []uint64{1, 7, 42, 1234} {
		cfg := DefaultConfig(seed)
		cfg.Stress = seed%2 == 0
		a, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Run(cfg)
		if a.TraceHash != b.TraceHash || a.Events != b.Events || a.Commits != b.Commits {
			t.Fatalf("seed %d: two runs differ: hash %x vs %x, events %d vs %d\n%s",
				seed, a.TraceHash, b.TraceHash, a.Events, b.Events, replayHint(seed, cfg.Stress))
		}
		other, _ := Run(DefaultConfig(seed + 1000))
		if other.TraceHash == a.TraceHash {
			t.Fatalf("seeds %d and %d gave the same trace hash", seed, seed+1000)
		}
	}
}

// TestSimShrink shrinks a run that fails under a mutation to a smaller
// fault schedule that still fails the same way.
func TestSimShrink(t *testing.T) {
	if !mutation.Enabled {
		t.Skip(mutation.SkipReason)
	}
	defer mutation.Set(mutation.SkipTakeoverWait)()
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := DefaultConfig(seed)
		cfg.Stress = true
		full := GenerateFaults(cfg)
		small, res := Shrink(cfg, 60)
		if res == nil {
			continue
		}
		if len(small.Faults) > len(full) {
			t.Fatalf("shrinking grew the schedule")
		}
		t.Logf("seed %d: %d faults shrunk to %d, still %s:\n%s", seed, len(full), len(small.Faults), res.Violations[0], FormatFaults(small.Faults))
		again, _ := Run(small)
		if !again.Failed() {
			t.Fatalf("the shrunk schedule does not fail on replay")
		}
		return
	}
	t.Fatal("no seed failed under the mutation")
}
