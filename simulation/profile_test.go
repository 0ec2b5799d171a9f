package simulation

import (
	"testing"

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
