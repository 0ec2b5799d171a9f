package simulation

import (
	"math/rand/v2"
	"slices"
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
	cfg.LoseTransfers = 0.15
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

// TestSimHandoffWordsGap compares planned moves' gaps (the old owner's
// stop → the new owner's start) at version 6 and at version 5 on the same
// seeds and drains, without the crashes and lost Transfers: in the model a commit is a
// 0.5–3 ms round (5% slow fsyncs of 5–40 ms) and a word two messages of
// 0.1–1 ms (5% slow, 5–150 ms). It logs the quantiles; it fails only if
// the words do not shorten the median gap.
func TestSimHandoffWordsGap(t *testing.T) {
	seeds := uint64(20)
	if raceEnabled || testing.Short() {
		seeds = 4
	}
	gaps := map[uint32][]time.Duration{}
	starts := map[uint32]int{}
	for _, v := range []uint32{ledger.VersionHandoffWords - 1, ledger.VersionHandoffWords} {
		for seed := uint64(1); seed <= seeds; seed++ {
			cfg := wordsConfig(seed)
			// The binaries speak at most v (a cluster of the release
			// before version 6, or this one): not the default, which is
			// ledger.MaxClusterVersion since 6 is released.
			cfg.ClusterVersion = v
			cfg.Stress, cfg.RandomFaults, cfg.LoseTransfers = false, false, 0
			var faults []Fault
			for _, f := range cfg.Faults {
				if f.Kind == Drain {
					faults = append(faults, f)
				}
			}
			cfg.Faults = faults
			res, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Failed() {
				t.Fatalf("version %d seed %d: %v\n%s", v, seed, res.Violations, replayHint(seed, false))
			}
			gaps[v] = append(gaps[v], res.HandoffGaps...)
			starts[v] += res.WordStarts
		}
		slices.Sort(gaps[v])
	}
	q := func(v uint32, p float64) time.Duration {
		g := gaps[v]
		if len(g) == 0 {
			return 0
		}
		return g[min(len(g)-1, int(p*float64(len(g))))]
	}
	for _, v := range []uint32{ledger.VersionHandoffWords - 1, ledger.VersionHandoffWords} {
		t.Logf("version %d: %d planned moves, %d starts on a word, gap p50 %v p90 %v p99 %v max %v", v, len(gaps[v]),
			starts[v], q(v, 0.5), q(v, 0.9), q(v, 0.99), q(v, 1))
	}
	// The comparison is 5 against 6, not 6 against itself.
	if starts[ledger.VersionHandoffWords-1] != 0 || starts[ledger.VersionHandoffWords] == 0 {
		t.Fatalf("starts on a word: %d at version %d (want none), %d at version %d (want some)",
			starts[ledger.VersionHandoffWords-1], ledger.VersionHandoffWords-1, starts[ledger.VersionHandoffWords], ledger.VersionHandoffWords)
	}
	if len(gaps[ledger.VersionHandoffWords]) == 0 || q(ledger.VersionHandoffWords, 0.5) >= q(ledger.VersionHandoffWords-1, 0.5) {
		t.Fatal("the words do not shorten the median gap")
	}
}

// revokeFaultConfig is wordsConfig's drains (no other faults) with the
// drained node armed, on each drain, to act while the leader's Revoke of
// one of its shards is in flight (DuringRevoke): resign the shard (or
// resign it up to 30 ms later), crash, or the leader crashes — action
// picks which (-1: a different one per drain).
func revokeFaultConfig(seed uint64, action int) Config {
	cfg := wordsConfig(seed)
	cfg.Stress, cfg.RandomFaults, cfg.LoseTransfers = false, false, 0
	r := rand.New(rand.NewPCG(seed, 67))
	var faults []Fault
	for i, f := range cfg.Faults {
		if f.Kind != Drain {
			continue
		}
		a := action
		if a < 0 {
			a = (i + int(seed)) % 3
		}
		dur := 100*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Second)))
		if a == RevokeResign {
			// Half resign while the Revoke is in flight, half up to 30 ms
			// later, when the old owner may have told its word.
			dur = 0
			if r.IntN(2) == 0 {
				dur = time.Duration(r.Int64N(int64(30 * time.Millisecond)))
			}
		}
		faults = append(faults, Fault{At: f.At - time.Millisecond, Kind: DuringRevoke, Node: f.Node, Value: float64(a), Dur: dur}, f)
	}
	cfg.Faults = faults
	return cfg
}

// TestSimRevokeInFlight: under cluster version 6 the old owner resigns the
// shard, or dies, or the leader dies, while the leader's Revoke of that
// shard toward a target is in flight (before the old owner's word or
// Transfer can exist) — and S1–S4 hold, each action fired.
func TestSimRevokeInFlight(t *testing.T) {
	seeds := uint64(24)
	if raceEnabled || testing.Short() {
		seeds = 6
	}
	for _, action := range []int{RevokeResign, RevokeCrashOwner, RevokeCrashLeader} {
		fired, starts := 0, 0
		for seed := uint64(1); seed <= seeds; seed++ {
			res, err := Run(revokeFaultConfig(seed, action))
			if err != nil {
				t.Fatal(err)
			}
			if res.Failed() {
				t.Fatalf("action %d seed %d: %v\n%s", action, seed, res.Violations, replayHint(seed, false))
			}
			fired, starts = fired+res.RevokeFaults, starts+res.WordStarts
		}
		t.Logf("action %d: %d seeds, %d faults fired while a Revoke was in flight, %d starts on a word", action, seeds, fired, starts)
		if fired == 0 {
			t.Fatalf("action %d: no fault fired during a Revoke: the scenario does not exercise it", action)
		}
	}
}
