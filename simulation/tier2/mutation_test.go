package tier2

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/node"
)

// TestTier2Mutations shows that tier 2 can fail: with one safety rule of
// the real code switched off (internal/mutation), a scenario built to
// exercise that rule must report a violation of the guarantee the rule
// protects within a few seeds (goroutine scheduling inside the bubble is
// not deterministic, so one seed can miss; a run takes well under a second
// of wall time, so the test allows 16). The switches are process-wide, so this test
// does not run in parallel with the others.
func TestTier2Mutations(t *testing.T) {
	if !mutation.Enabled {
		t.Skip(mutation.SkipReason)
	}
	if testing.Short() {
		t.Skip("mutation runs are skipped with -short")
	}
	const seeds = 16
	for _, c := range mutationCases {
		t.Run(c.sw.String(), func(t *testing.T) {
			scenario := func(seed int64) Scenario {
				return Scenario{Name: "mutation-" + c.sw.String(), Seed: seed, Nodes: 4, Diskless: c.diskless,
					Duration: 30 * time.Second, FaultsUntil: 15 * time.Second, Faults: []Fault{c.fault},
					App: App{Worker: c.worker}, Fenced: c.fenced}
			}
			// The control: the scenario is clean with every rule on.
			if res := runQuiet(t, scenario(1)); res.Failed() {
				t.Fatalf("scenario fails without the mutation (seed 1): %v", res.Violations)
			}
			restore := mutation.Set(c.sw)
			defer restore()
			var seen []string
			for seed := int64(1); seed <= seeds; seed++ {
				res := runQuiet(t, scenario(seed))
				for _, v := range res.Violations {
					if v.Check == c.want {
						t.Logf("%s caught with seed %d: %s", c.sw, seed, v)
						return
					}
					seen = append(seen, v.String())
				}
			}
			t.Fatalf("mutation %s not caught as %s within %d seeds; other violations: %s",
				c.sw, c.want, seeds, strings.Join(seen, "; "))
		})
	}
}

// mutationCases are the tier-2 scenarios, one per mutation they are built
// to expose.
var mutationCases = []struct {
	sw     mutation.Switch
	want   string // the guarantee a violation must name
	fault  Fault
	worker func(context.Context, *Env, node.Token) error // nil: returns when its context ends
	fenced []node.ShardRange                             // Scenario.Fenced
	// diskless is Scenario.Diskless: members (the last slots) that follow
	// the committed-state stream.
	diskless int
}{
	// skip-expiry-wait is not here: the tier-1 sweep catches it within two
	// seeds (mutations.json), and in tier 2 under the race detector the
	// mutated leader expires nodes whose heartbeats are merely late, so a
	// run breaks liveness (L1) more often than it shows an overlap.
	// The leader takes over a revoked shard without waiting out lease
	// and drain timeout, while its draining owner's worker is still
	// finishing (within the drain timeout): the successor overlaps it.
	{mutation.SkipTakeoverWait, "S4", Fault{At: 6 * time.Second, Kind: Drain, Node: Shard0Owner, For: 6 * time.Second}, slowDrain, nil, 0},
	// Under fenced takeover the token check is all that keeps a cut-off
	// owner's writes out once its successor is granted (S4 is waived):
	// with the ledger's App epoch check off, the owner of shard 0 (fenced),
	// cut off for 700 ms — past FencedAfter, within its lease — writes
	// with its old token after the takeover and is accepted.
	{mutation.AppStaleEpoch, "S2", Fault{At: 6 * time.Second, Kind: Isolate, Node: FollowerOwner, For: 700 * time.Millisecond},
		(&writeLog{stale: map[string]int{}, ok: map[string]int{}}).worker, []node.ShardRange{{First: 0, Last: 3}}, 0},
	// The member (slot 3, on the committed-state stream) is cut off for
	// 2 s while the built-in workload commits: resuming from the voter's
	// index instead of its own, its replica lacks the entries committed
	// meanwhile, acknowledged ones among them (the workload's check).
	{mutation.StreamResumeSkips, "app", Fault{At: 6 * time.Second, Kind: Isolate, Node: 3, For: 2 * time.Second}, nil, nil, 1},
}

// slowDrain is a worker that needs 400 ms to wind down once its term ends
// — well within the fast profile's 1 s drain timeout, so the real rules
// keep it from overlapping its successor.
func slowDrain(ctx context.Context, env *Env, _ node.Token) error {
	<-ctx.Done()
	_ = env.Sleep(context.WithoutCancel(ctx), 400*time.Millisecond)
	return nil
}

// runQuiet runs sc in its own bubble and returns the result without
// reporting its violations as test errors.
func runQuiet(t *testing.T, sc Scenario) *Result {
	t.Helper()
	var res *Result
	synctest.Test(t, func(t *testing.T) {
		var err error
		if res, err = Run(context.Background(), sc); err != nil {
			t.Fatalf("scenario %q seed %d: %v", sc.Name, sc.Seed, err)
		}
	})
	if res == nil {
		t.Fatalf("scenario %q seed %d produced no result", sc.Name, sc.Seed)
	}
	return res
}
