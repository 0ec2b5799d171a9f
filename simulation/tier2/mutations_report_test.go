package tier2

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
)

var flagMutations = flag.String("mutations.file", "", "TestTier2MutationsReport: the mutations.json TestMutations wrote; entries the sweep missed are run here and the file is updated")

// mutationEntry mirrors simulation.MutationReport (the file's schema).
type mutationEntry struct {
	Name         string `json:"name"`
	Rule         string `json:"rule"`
	CaughtBy     string `json:"caught_by"`
	SeedsToCatch int    `json:"seeds_to_catch"`
	Seed         uint64 `json:"seed,omitempty"`
	Violation    string `json:"violation,omitempty"`
}

// TestTier2MutationsReport is make mutations' second step: every mutation
// the sweep did not catch runs through tier 2 — its own scenario from
// mutationCases when it has one, else a random-fault scenario — for up to
// 16 seeds, and the file records the catch. It fails if any mutation is
// still not caught.
func TestTier2MutationsReport(t *testing.T) {
	if *flagMutations == "" {
		t.Skip("no -mutations.file given")
	}
	if !mutation.Enabled {
		t.Fatal(mutation.SkipReason + ": run it with -tags mutations")
	}
	b, err := os.ReadFile(*flagMutations)
	if err != nil {
		t.Fatal(err)
	}
	var entries []mutationEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		t.Fatal(err)
	}
	const seeds = 16
	for i, e := range entries {
		if e.CaughtBy != "" {
			continue
		}
		sw, ok := mutation.ByName(e.Name)
		if !ok {
			t.Errorf("unknown mutation %q in %s", e.Name, *flagMutations)
			continue
		}
		scenario := func(seed int64) Scenario {
			return Scenario{Name: "mutation-" + e.Name, Seed: seed, Nodes: 4, RandomFaults: true,
				Duration: 30 * time.Second, FaultsUntil: 15 * time.Second, App: App{Worker: slowDrain, JobsPerSecond: 5}}
		}
		for _, c := range mutationCases {
			if c.sw == sw {
				scenario = func(seed int64) Scenario {
					return Scenario{Name: "mutation-" + e.Name, Seed: seed, Nodes: 4, Diskless: c.diskless,
						Duration: 30 * time.Second, FaultsUntil: 15 * time.Second, Faults: []Fault{c.fault},
						App: App{Worker: c.worker}}
				}
			}
		}
		func() {
			restore := mutation.Set(sw)
			defer restore()
			for seed := int64(1); seed <= seeds; seed++ {
				if res := runQuiet(t, scenario(seed)); res.Failed() {
					entries[i].CaughtBy, entries[i].SeedsToCatch = "tier2", int(seed)
					entries[i].Seed, entries[i].Violation = uint64(seed), res.Violations[0].String()
					t.Logf("%s caught by tier 2 at seed %d: %s", e.Name, seed, res.Violations[0])
					return
				}
			}
			t.Errorf("mutation %s (%s) caught neither by the sweep nor by tier 2 (%d seeds)", e.Name, e.Rule, seeds)
		}()
	}
	caught := 0
	for _, e := range entries {
		by := e.CaughtBy
		if by == "" {
			by = "-"
		} else {
			caught++
		}
		fmt.Printf("%-28s %-6s %4d  %s\n", e.Name, by, e.SeedsToCatch, e.Rule)
	}
	fmt.Printf("mutations: %d of %d caught\n", caught, len(entries))
	out, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*flagMutations, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
