package simulation

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	flagSeed     = flag.Uint64("sim.seed", 0, "run only this seed (TestSimSeed)")
	flagSeeds    = flag.Int("sim.seeds", 2000, "number of seeds TestSimSeeds runs")
	flagDuration = flag.Duration("sim.duration", 0, "run seeds until this much wall time has passed (overrides -sim.seeds)")
	flagTrace    = flag.Bool("sim.trace", false, "print the full event trace of TestSimSeed")
	flagStress   = flag.Bool("sim.stress", false, "TestSimSeed: use the stress profile")
	flagProfile  = flag.String("sim.profile", "default", "TestSimSeed: the profile (default, quick or fast)")
)

func seedsFlagSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "sim.seeds" })
	return set
}

func replayHint(seed uint64, stress bool, profile ...string) string {
	extra := ""
	if stress {
		extra = " -sim.stress"
	}
	if len(profile) > 0 && profile[0] != "" && profile[0] != "default" {
		extra += " -sim.profile=" + profile[0]
	}
	return fmt.Sprintf("replay: go test ./simulation -run TestSimSeed -sim.seed=%d -sim.trace%s", seed, extra)
}

// TestSimSeed runs one seed (the -sim.seed flag), optionally with a full
// trace; it is the replay command printed by every failure.
func TestSimSeed(t *testing.T) {
	if *flagSeed == 0 {
		t.Skip("no -sim.seed given")
	}
	cfg := DefaultConfig(*flagSeed)
	switch *flagProfile {
	case "quick":
		cfg = QuickConfig(*flagSeed)
	case "fast":
		cfg = fastProfileConfig(*flagSeed)
	}
	cfg.Stress = *flagStress
	if *flagTrace {
		cfg.Trace = os.Stdout
	}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: %d events, %d commits, faults:\n%s", res.Seed, res.Events, res.Commits, FormatFaults(res.Faults))
	for _, v := range res.Violations {
		t.Errorf("%s", v)
	}
}

// seedSummary aggregates many runs.
type seedSummary struct {
	mu         sync.Mutex
	seeds      int
	events     uint64
	simulated  time.Duration
	failed     []*Result
	slowest    uint64
	slowestDur time.Duration
}

// runSeeds runs seeds from first on all CPUs until n seeds have run or the
// wall-clock budget is spent (when budget > 0).
func runSeeds(t *testing.T, first uint64, n int, budget time.Duration, mk func(seed uint64) Config) *seedSummary {
	var sum seedSummary
	var next atomic.Uint64
	next.Store(first)
	start := time.Now()
	lastProgress := start
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if budget > 0 && time.Since(start) > budget {
					return
				}
				seed := next.Add(1) - 1
				if budget == 0 && seed >= first+uint64(n) {
					return
				}
				t0 := time.Now()
				res, err := Run(mk(seed))
				if err != nil {
					t.Error(err)
					return
				}
				d := time.Since(t0)
				sum.mu.Lock()
				sum.seeds++
				sum.events += res.Events
				sum.simulated += res.Simulated
				if d > sum.slowestDur {
					sum.slowest, sum.slowestDur = seed, d
				}
				if res.Failed() {
					sum.failed = append(sum.failed, res)
				}
				if budget > 0 && time.Since(lastProgress) > 10*time.Second {
					lastProgress = time.Now()
					fmt.Printf("sim: %v: %d seeds, %d events, %d failed\n", time.Since(start).Round(time.Second), sum.seeds, sum.events, len(sum.failed))
				}
				sum.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	t.Logf("sim: %d seeds, %d events, %d violations-seeds in %v (%.0f seeds/s, %.0f simulated-s per wall-s); slowest seed %d (%v)",
		sum.seeds, sum.events, len(sum.failed), el.Round(time.Millisecond), float64(sum.seeds)/el.Seconds(),
		sum.simulated.Seconds()/el.Seconds(), sum.slowest, sum.slowestDur.Round(time.Millisecond))
	return &sum
}

// TestSimSeeds runs many random seeds (-sim.seeds, or -sim.duration of
// wall time) and demands zero violations.
func TestSimSeeds(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("-sim.seed given: TestSimSeed replays it")
	}
	n := *flagSeeds
	if raceEnabled && !seedsFlagSet() {
		n = 400 // the race detector makes every seed ~5× slower; CI budget
	}
	if testing.Short() {
		n = 200
	}
	mk := QuickConfig
	if *flagDuration > 0 {
		mk = DefaultConfig // make sim: full runs with liveness checks
	}
	sum := runSeeds(t, 1, n, *flagDuration, mk)
	checkSummary(t, sum)
}

// TestSimLiveness runs full-length seeds, long enough after the faults
// stop for the liveness checks (L1–L3), with zero violations.
func TestSimLiveness(t *testing.T) {
	if *flagSeed != 0 || *flagDuration > 0 {
		t.Skip("replaying one seed or running by duration")
	}
	n := 100
	if raceEnabled {
		n = 25
	}
	if testing.Short() {
		n = 20
	}
	checkSummary(t, runSeeds(t, 100_000, n, 0, DefaultConfig))
}

// TestSimStressSeeds runs seeds of the stress profile (the one the mutation
// test uses) without mutations: it must show zero violations, or the
// mutation test proves nothing.
func TestSimStressSeeds(t *testing.T) {
	if *flagSeed != 0 || *flagDuration > 0 {
		t.Skip("replaying one seed or running by duration")
	}
	n := mutationSeeds
	if raceEnabled {
		n = 20
	}
	sum := runSeeds(t, 1, n, 0, func(seed uint64) Config {
		c := DefaultConfig(seed)
		c.Stress = true
		return c
	})
	checkSummary(t, sum)
}

func checkSummary(t *testing.T, sum *seedSummary) {
	if *flagDuration > 0 {
		fmt.Printf("sim summary: seeds=%d events=%d violations=%d slowest-seed=%d (%v)\n",
			sum.seeds, sum.events, len(sum.failed), sum.slowest, sum.slowestDur.Round(time.Millisecond))
	}
	for i, r := range sum.failed {
		if i >= 5 {
			break
		}
		msg := fmt.Sprintf("seed %d failed: %v\nfaults:\n%s%s", r.Seed, r.Violations, FormatFaults(r.Faults), replayHint(r.Seed, r.Stress, r.Config.Profile))
		if i == 0 {
			cfg := r.Config
			if small, res := Shrink(cfg, 40); res != nil {
				msg += fmt.Sprintf("\nshrunk to %d faults (%s):\n%s", len(small.Faults), res.Violations[0], FormatFaults(small.Faults))
			}
		}
		t.Error(msg)
	}
}
