package simulation

import (
	"math/rand/v2"
	"testing"
	"time"
)

// mutationSeeds is how many stress seeds TestSimStressSeeds runs clean
// (TestMutations, in mutations_test.go, runs each mutation against them).
const mutationSeeds = 60

// TestSimLeaderChangeClean is leaderChangeConfig's control: with every
// rule on, repeated leader changes break nothing.
func TestSimLeaderChangeClean(t *testing.T) {
	runClean(t, "leader changes", leaderChangeConfig)
}

// runClean runs 40 seeds of a mutation scenario with every rule on and
// fails at the first violation: the scenario's control.
func runClean(t *testing.T, what string, mk func(seed uint64) Config) {
	t.Helper()
	for seed := uint64(1); seed <= 40; seed++ {
		res, err := Run(mk(seed))
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed() {
			t.Fatalf("%s, seed %d: %v\n%s", what, seed, res.Violations, replayHint(seed, false))
		}
	}
}

// leaderChangeConfig isolates the control-group leader again and again,
// each time while the owners hold leases the next leader cannot have
// seen: the scenario for the rule that a new leader waits them out.
func leaderChangeConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.RandomFaults = false
	cfg.StopAtFirstViolation = true
	cfg.FaultsUntil = 12 * time.Second
	cfg.Duration = 20 * time.Second
	r := rand.New(rand.NewPCG(seed, 11))
	for i := range 4 {
		cfg.Faults = append(cfg.Faults, Fault{
			At:   time.Duration(i)*2500*time.Millisecond + 2*time.Second + time.Duration(r.Int64N(int64(400*time.Millisecond))),
			Kind: Isolate, Node: LeaderNode,
			Dur: time.Second + time.Duration(r.Int64N(int64(time.Second))),
		})
	}
	return cfg
}

// driftConfig is the clock-drift scenario: the voters' clocks (so the
// leader's) run fast at 1+MaxDrift, the two non-voters' (which own shards)
// run slow at slowRate, and the non-voters are paused or isolated for
// longer than a lease, again and again.
func driftConfig(seed uint64, slowRate float64) Config {
	cfg := DefaultConfig(seed)
	fast := 1 + cfg.Ownership.MaxDrift
	cfg.ClockRates = []float64{fast, fast, fast, slowRate, slowRate}
	cfg.RandomFaults = false
	cfg.StopAtFirstViolation = true
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range 6 {
		kind := []FaultKind{Pause, Isolate}[r.IntN(2)]
		cfg.Faults = append(cfg.Faults, Fault{
			At:   time.Duration(i)*700*time.Millisecond + 600*time.Millisecond + time.Duration(r.Int64N(int64(200*time.Millisecond))),
			Kind: kind, Node: 3 + r.IntN(2),
			Dur: cfg.Ownership.Lease + time.Duration(r.Int64N(int64(cfg.Ownership.Lease))),
		})
	}
	return cfg
}

// TestSimDrift shows that the drift scenario is safe while clocks stay
// within the bound, and that drift beyond the bound breaks S4 — and only
// S4: the ledger's guarantees (S1–S3) do not depend on clocks.
func TestSimDrift(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := driftConfig(seed, 1-DefaultConfig(seed).Ownership.MaxDrift)
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed() {
			t.Fatalf("drift within the bound, seed %d: %v\n%s", seed, res.Violations, replayHint(seed, false))
		}
	}
	caught := uint64(0)
	for seed := uint64(1); seed <= 40 && caught == 0; seed++ {
		cfg := driftConfig(seed, 0.6) // 40% slow: four times the bound
		cfg.StopAtFirstViolation = false
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Violations {
			if v.Rule != "S4" && v.Rule[0] == 'S' {
				t.Fatalf("drift beyond the bound broke %s, not only S4 (seed %d): %s", v.Rule, seed, v)
			}
			if v.Rule == "S4" && caught == 0 {
				caught = seed
				t.Logf("drift beyond the bound breaks S4 at seed %d: %s", seed, v)
			}
		}
	}
	if caught == 0 {
		t.Fatal("drift beyond the bound never broke S4 in 40 seeds")
	}
}

// TestSimRevokeRestartClean is revokeRestartConfig's control: with every
// rule on, owners restarted in the middle of their drain break nothing.
func TestSimRevokeRestartClean(t *testing.T) {
	runClean(t, "restarts mid-drain", revokeRestartConfig)
}

// revokeRestartConfig drains a node and, 0.6–1 s later while its shards
// are still Revoking, restarts it with the same incarnation after 0.3–0.7 s
// down (shorter than the leader's expiry wait, so its liveness stays
// valid): the restarted process first sees those shards Revoking, the
// scenario for protocol rule 4's "a node never starts acting on a
// Revoking shard" (act-on-revoking). The leader hands each over after
// the node's release or the takeover wait counted from the Revoke, which a
// process that started a fresh drain window at its restart outlasts.
func revokeRestartConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.RandomFaults = false
	cfg.StopAtFirstViolation = true
	cfg.FaultsUntil = 12 * time.Second
	cfg.Duration = 20 * time.Second
	r := rand.New(rand.NewPCG(seed, 13))
	for i := range 5 {
		at := time.Duration(i)*2*time.Second + 2*time.Second + time.Duration(r.Int64N(int64(300*time.Millisecond)))
		node := r.IntN(cfg.Nodes)
		cfg.Faults = append(cfg.Faults,
			Fault{At: at, Kind: Drain, Node: node, Dur: 2 * time.Second},
			Fault{At: at + 600*time.Millisecond + time.Duration(r.Int64N(int64(400*time.Millisecond))), Kind: CrashSameIncarnation, Node: node,
				Dur: 300*time.Millisecond + time.Duration(r.Int64N(int64(400*time.Millisecond)))})
	}
	return cfg
}

// TestSimRenewalScenariosClean runs the controls of the lease-renewal
// scenarios (cluster version 4) with every rule on.
func TestSimRenewalScenariosClean(t *testing.T) {
	runClean(t, "deposed leaders", depositionConfig)
	runClean(t, "slow replicas through a drain", slowRevokeConfig)
	runClean(t, "owners paused through their expiry", expiringConfig)
}

// depositionConfig cuts the control-group leader and one non-voter off the
// other voters, again and again: the non-voter keeps renewing with the old
// leader, which keeps receiving renewals while the others elect a new one
// (renew-without-confirm: a deposed leader must not ack without a
// quorum).
func depositionConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.RandomFaults = false
	cfg.StopAtFirstViolation = true
	cfg.FaultsUntil = 12 * time.Second
	cfg.Duration = 20 * time.Second
	r := rand.New(rand.NewPCG(seed, 17))
	for i := range 4 {
		at := time.Duration(i)*2500*time.Millisecond + 2*time.Second + time.Duration(r.Int64N(int64(400*time.Millisecond)))
		dur := 1500*time.Millisecond + time.Duration(r.Int64N(int64(time.Second)))
		cfg.Faults = append(cfg.Faults,
			Fault{At: at, Kind: CutVoters, Node: LeaderNode, Dur: dur},
			Fault{At: at, Kind: CutVoters, Node: cfg.Voters + r.IntN(cfg.Nodes-cfg.Voters), Dur: dur})
	}
	return cfg
}

// slowRevokeConfig drains a non-voter and stalls its replica for longer
// than the takeover wait right after: it keeps renewing with the leader
// but must not extend its lease past entries (the Revokes) it has not
// applied (renew-without-apply-wait).
func slowRevokeConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.RandomFaults = false
	cfg.StopAtFirstViolation = true
	cfg.FaultsUntil = 14 * time.Second
	cfg.Duration = 20 * time.Second
	r := rand.New(rand.NewPCG(seed, 19))
	stall := 3*(cfg.Ownership.Lease+cfg.Ownership.DrainTimeout)/2 + time.Duration(r.Int64N(int64(time.Second)))
	for i := range 3 {
		at := time.Duration(i)*4*time.Second + 2*time.Second + time.Duration(r.Int64N(int64(300*time.Millisecond)))
		node := cfg.Voters + r.IntN(cfg.Nodes-cfg.Voters)
		cfg.Faults = append(cfg.Faults,
			Fault{At: at, Kind: SlowApply, Node: node, Dur: stall},
			Fault{At: at + time.Duration(r.Int64N(int64(20*time.Millisecond))), Kind: Drain, Node: node, Dur: stall})
	}
	return cfg
}

// expiringConfig pauses a non-voter for about as long as the leader waits
// before expiring it, its replica stalled meanwhile and a while after, with
// the job workload off (a quiet log): its first renewal after the pause
// can reach the leader between the decision to expire it and the expiry's
// apply (renew-while-expiring).
func expiringConfig(seed uint64) Config {
	cfg := DefaultConfig(seed)
	cfg.RandomFaults = false
	cfg.StopAtFirstViolation = true
	cfg.Workload = false
	cfg.Probes = false
	cfg.FaultsUntil = 16 * time.Second
	cfg.Duration = 20 * time.Second
	r := rand.New(rand.NewPCG(seed, 23))
	wait := time.Duration(float64(cfg.Ownership.Lease) * (1 + cfg.Ownership.MaxDrift))
	for i := range 6 {
		at := time.Duration(i)*2*time.Second + 2*time.Second + time.Duration(r.Int64N(int64(300*time.Millisecond)))
		pause := wait - cfg.Ownership.RenewEvery/2 + time.Duration(r.Int64N(int64(cfg.Ownership.RenewEvery)))
		node := cfg.Voters + r.IntN(cfg.Nodes-cfg.Voters)
		cfg.Faults = append(cfg.Faults,
			Fault{At: at, Kind: Pause, Node: node, Dur: pause},
			Fault{At: at, Kind: SlowApply, Node: node, Dur: pause + 500*time.Millisecond})
	}
	return cfg
}
