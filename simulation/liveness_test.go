package simulation

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The default profile's runs are long enough after the faults for the
// liveness checks: Run skips L1–L3 when the quiet time is shorter than
// quietNeeded, so a profile that drifts below it would silently judge
// nothing (it did: 8 s of quiet against 9.6 s needed once DrainTimeout
// was raised to the lease).
func TestDefaultConfigJudgesLiveness(t *testing.T) {
	c := DefaultConfig(1)
	if q, need := c.Duration-c.FaultsUntil, quietNeeded(c); q < need {
		t.Fatalf("DefaultConfig: %v of quiet after the faults, liveness needs %v", q, need)
	}
	h := handoffConfig(1)
	if q, need := h.Duration-h.FaultsUntil, quietNeeded(h); q < need {
		t.Fatalf("handoffConfig: %v of quiet after the faults, liveness needs %v", q, need)
	}
}

// handoffConfig drains one node for good once the cluster has settled
// after a short burst of random faults: its shards leave in planned moves
// (Revoke, drain, Release or Transfer, Grant) that L3 judges — the
// scenario of no-handoff, where every such move waits for the leader's
// takeover instead.
func handoffConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.StopAtFirstViolation = true
	cfg.FaultsUntil = 2 * time.Second
	o := cfg.Ownership
	settled := cfg.FaultsUntil + time.Duration(float64(o.Lease)*(1+o.MaxDrift)) + o.StableFor + time.Second
	cfg.Faults = GenerateFaults(cfg)
	r := rand.New(rand.NewPCG(seed, 41))
	cfg.Faults = append(cfg.Faults, Fault{At: settled + time.Duration(r.Int64N(int64(time.Second))), Kind: Drain,
		Node: r.IntN(cfg.Nodes), Dur: cfg.Duration})
	return cfg
}

// TestSimHandoffClean is handoffConfig's control: with every rule on, the
// planned moves of a drain after the faults hand over within L3's bound.
func TestSimHandoffClean(t *testing.T) {
	runClean(t, "a drain after the faults", handoffConfig)
}

// L2's oracle on its own: quota arithmetic flags an owner outside the
// eligible nodes and a node off its ⌊P/N⌋..⌈P/N⌉ quota (or, with
// weights, more than two shards off its weighted share), and passes a
// balanced placement.
func TestBalanceViolations(t *testing.T) {
	el := []string{"n1", "n2", "n3"}
	for _, c := range []struct {
		name    string
		owners  []string
		weights map[string]int
		want    int
	}{
		{"balanced", []string{"n1", "n2", "n3", "n1", "n2", "n3", "n1"}, nil, 0},
		{"one over, one under", []string{"n1", "n1", "n1", "n1", "n2", "n2", "n3"}, nil, 2},
		{"an owner not eligible", []string{"n1", "n2", "n3", "n1", "n2", "n3", "n4"}, nil, 1},
		{"unowned", []string{"n1", "n2", "n3", "n1", "n2", "n3", ""}, nil, 1},
		{"an owner not eligible, one under", []string{"n1", "n2", "n3", "n1", "n2", "n4", "n4"}, nil, 3},
		{"weighted, within two", []string{"n1", "n1", "n1", "n1", "n1", "n2", "n3"}, map[string]int{"n1": 3}, 0},
		{"weighted, far off", []string{"n1", "n2", "n2", "n2", "n2", "n3", "n3"}, map[string]int{"n1": 3}, 2},
	} {
		if got := balanceViolations(c.owners, el, c.weights, false); len(got) != c.want {
			t.Errorf("%s: %d violations %q, want %d", c.name, len(got), got, c.want)
		}
	}
}
