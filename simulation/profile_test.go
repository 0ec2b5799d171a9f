package simulation

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ownership"
)

// fastProfileConfig is the fast production profile in the simulator: its
// lease timing (ownership.FastConfig) and the election delay of its Raft
// heartbeat timeout (cluster.FastControlConfig), the row node/profiles.go
// pairs them in.
func fastProfileConfig(seed uint64) Config {
	return ProfileConfig(seed, "fast", ownership.FastConfig(), cluster.FastControlConfig().HeartbeatTimeout)
}

// TestSimFastProfileSeeds runs full-length seeds (random faults, liveness
// checks) of the fast profile: its lease is short next to the Raft
// timings, and a leader loss must be repaired inside it.
func TestSimFastProfileSeeds(t *testing.T) {
	if *flagSeed != 0 || *flagDuration > 0 {
		t.Skip("replaying one seed or running by duration")
	}
	n := 60
	if raceEnabled || testing.Short() {
		n = 15
	}
	checkSummary(t, runSeeds(t, 200_000, n, 0, fastProfileConfig))
}

// TestSimFastLeaderLoss: with the fast profile, losing the control-group
// leader (killed, or isolated for 2 s) at a random instant costs an
// election, not the other nodes' leases: the new leader is elected inside
// the lease, counts the others' leases from the voters' confirm records
// and gives them 2·R to renew with it, so the ledger accepts at most one
// expiry — the lost leader's.
func TestSimFastLeaderLoss(t *testing.T) {
	if *flagSeed != 0 || *flagDuration > 0 {
		t.Skip("replaying one seed or running by duration")
	}
	n := uint64(40)
	if raceEnabled || testing.Short() {
		n = 10
	}
	for _, kind := range []FaultKind{Crash, Isolate} {
		for seed := uint64(1); seed <= n; seed++ {
			cfg := fastProfileConfig(seed)
			cfg.RandomFaults = false
			cfg.Duration = 8 * time.Second
			cfg.Faults = []Fault{{At: 2*time.Second + time.Duration(seed)*7*time.Millisecond, Kind: kind, Node: LeaderNode, Dur: 2 * time.Second}}
			res, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Failed() || res.ExpiriesCommitted > 1 {
				t.Errorf("leader %v, seed %d: %d expiries committed (want ≤ 1), violations %v\nfaults:\n%s", kind, seed, res.ExpiriesCommitted, res.Violations, FormatFaults(res.Faults))
			}
		}
	}
}
