package simulation

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// wordsConfig runs cluster version 6 (the handoff on the old owner's
// word, words.go) through drains whose old owner, on some of them, dies
// right after its word (crash, or a restart with the same incarnation),
// and on every other seed the stress faults besides: words delayed,
// reordered and lost, leaders lost while they hold words.
func wordsConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.ClusterVersion = ledger.VersionHandoffWords
	cfg.StopAtFirstViolation = true
	cfg.FaultsUntil = 12 * time.Second
	cfg.Duration = 20 * time.Second
	if seed%2 == 0 {
		cfg.Stress = true
		cfg.Faults = GenerateFaults(cfg)
	} else {
		cfg.RandomFaults = false
	}
	r := rand.New(rand.NewPCG(seed, 61))
	for i := range 5 {
		at := time.Duration(i)*2*time.Second + 2*time.Second + time.Duration(r.Int64N(int64(300*time.Millisecond)))
		node := r.IntN(cfg.Nodes)
		drain := 1500 * time.Millisecond
		switch r.IntN(3) {
		case 0:
			// The old owner dies right after its words and comes back,
			// a new incarnation, once its drain is over: the ring gives
			// a restarted owner its shards back, which must wait until
			// no word can be valid any more.
			crash := 200*time.Millisecond + time.Duration(r.Int64N(int64(time.Second)))
			drain = crash + 50*time.Millisecond
			cfg.Faults = append(cfg.Faults, Fault{At: at + crash, Kind: Crash, Node: node,
				Dur: 100*time.Millisecond + time.Duration(r.Int64N(int64(300*time.Millisecond)))})
		case 1:
			cfg.Faults = append(cfg.Faults, Fault{At: at + time.Duration(r.Int64N(int64(40*time.Millisecond))), Kind: CrashSameIncarnation, Node: node,
				Dur: 100*time.Millisecond + time.Duration(r.Int64N(int64(400*time.Millisecond)))})
		}
		cfg.Faults = append(cfg.Faults, Fault{At: at, Kind: Drain, Node: node, Dur: drain})
	}
	return cfg
}

// TestSimHandoffWordsClean: under cluster version 6 targets act on their
// old owners' words (WordStarts > 0, so the scenario exercises the rule)
// and S1–S4 hold, with every rule on.
func TestSimHandoffWordsClean(t *testing.T) {
	seeds := uint64(30)
	if raceEnabled || testing.Short() {
		seeds = 6
	}
	starts, relayed, handoffs := 0, 0, 0
	for seed := uint64(1); seed <= seeds; seed++ {
		res, err := Run(wordsConfig(seed))
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed() {
			t.Fatalf("seed %d: %v\n%s", seed, res.Violations, replayHint(seed, false))
		}
		starts, relayed, handoffs = starts+res.WordStarts, relayed+res.WordsRelayed, handoffs+res.Handoffs
	}
	t.Logf("%d seeds: %d handoffs proposed, %d words relayed, %d starts on a word", seeds, handoffs, relayed, starts)
	if starts == 0 {
		t.Fatal("no target acted on a word: the scenario does not exercise the rule")
	}
}
