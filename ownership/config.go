package ownership

import (
	"fmt"
	"math"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ring"
)

// Config holds the lease timings and placement policy shared by the leader's
// planner and every node's tracker. All nodes of a cluster must use the same
// Lease, RenewEvery, MaxDrift and DrainTimeout (docs/protocol.md).
//
// Start from a profile (FastConfig, DefaultConfig, SafeConfig, TestConfig)
// and call Validate; constructors call it too.
type Config struct {
	// Lease (D) is how long one committed heartbeat lets a node act,
	// counted from when it asked.
	Lease time.Duration
	// RenewEvery (R) is the heartbeat period; it must be below Lease/2 so
	// that one lost heartbeat does not end the lease.
	RenewEvery time.Duration
	// MaxDrift (δ) is the assumed bound on any clock's rate error, as a
	// fraction (0.1 = a clock may run 10% fast or slow). S4 holds only while
	// every clock's rate error stays within it (docs/guarantees.md).
	MaxDrift float64
	// DrainTimeout (T) is how long an owner may keep acting on a revoked
	// shard to let its workers finish.
	DrainTimeout time.Duration
	// MaxMovesInFlight (K) is the churn budget: at most this many shards are
	// Revoking at once. Failover grants of unowned shards are not limited.
	MaxMovesInFlight int
	// StableFor is the hysteresis: a node joins the placement ring only after
	// it has been eligible (alive, healthy, not draining) for StableFor, and
	// leaves it on a soft signal (gossip suspicion or death, low health) only
	// after that signal has lasted StableFor. Hard signals — lease expiry,
	// draining, a graceful leave — take effect at once. A node that lost
	// its place and comes back with a new incarnation (a restart) re-enters
	// sooner, after its first renewal, unless it restarts again and again
	// (planner.go, reentryWait: at most StableFor).
	StableFor time.Duration
	// MinHealth is the minimum gossiped health score (0..1) for a node to be
	// eligible to own shards.
	MinHealth float64
	// ForgetAfter is how long a node stays expired, absent from gossip and
	// owning nothing before the leader removes its record
	// (ledger.ForgetNode, from cluster version ledger.VersionForgetNodes):
	// disk-less members get a new id per pod, and their records would
	// otherwise pile up. 0 never forgets.
	ForgetAfter time.Duration
	// Ring configures placement; Ring.Partitions is the shard count. The
	// planner places with ring.Assign, which uses only Partitions (Load,
	// ReplicationFactor and MinLoad apply to the bounded-load ring.New).
	Ring ring.Config
	// ClusterName, if set, makes the leader record the cluster's
	// configuration (name, Ring.Partitions, cluster version) in the ledger
	// when it has none, and raise the cluster version once every node
	// holding a lease speaks a newer one (ledger.VersionTarget), unless
	// ManualFinalize. Empty leaves the ledger's cluster config alone.
	ClusterName string
	// ManualFinalize keeps the cluster version where it is until an
	// operator finalizes (`tenure upgrade finalize`): until then every
	// node may still go back to the previous binary.
	ManualFinalize bool
	// Load configures load-aware placement (docs/ring.md).
	Load LoadConfig
	// FencedAfter is how long the leader waits without seeing a heartbeat
	// of the owner of a shard under fenced takeover
	// (ledger.SetTakeoverPolicy) before it grants the shard to a successor
	// without waiting out the owner's lease; gossip reporting the owner
	// dead shortens it. 0 means 3·RenewEvery; otherwise it must exceed
	// RenewEvery (a live owner renews within it) and stay below the
	// expiry wait Lease·(1+MaxDrift), past which the lease rule applies.
	// All nodes need not agree on it: only the leader reads it.
	FencedAfter time.Duration
	// MaxVersion, if non-zero, caps the cluster versions this node's
	// heartbeats advertise below ledger.MaxClusterVersion: the node then
	// stands in for a binary of an older release (upgrade tests).
	MaxVersion uint32
}

// LoadConfig configures load-aware placement: on a settled placement the
// leader swaps a hot member's hottest shard with a cold member's cold one
// (ring.LoadSwap) when every ring member reports its load.
type LoadConfig struct {
	// Threshold: a member is hot above (1+Threshold)·its fair share of the
	// load (by weight). 0 turns load balancing off.
	Threshold float64
	// MinGain: a swap must cut the hot member's load by this fraction.
	MinGain float64
	// SwapsPerMinute is the budget: at most this many swaps (two moves
	// each) start in any minute.
	SwapsPerMinute int
	// Settle is how long the placement must have been settled (no move
	// planned or in flight), and how long after the last swap, before the
	// next swap is considered, so the loads are measured anew.
	Settle time.Duration
}

// DefaultLoadConfig is the load policy of the profiles: hot above 1.25×
// its share, swaps that gain at least 5%, at most 2 per minute, 15 s
// apart.
func DefaultLoadConfig() LoadConfig {
	return LoadConfig{Threshold: 0.25, MinGain: 0.05, SwapsPerMinute: 2, Settle: 15 * time.Second}
}

// DefaultForgetAfter is every profile's ForgetAfter.
const DefaultForgetAfter = 10 * time.Minute

// FastConfig is the fast profile of docs/protocol.md: 800 ms lease, 100 ms
// renewals (off the log from cluster version 4), δ = 2%
// (docs/guarantees.md). The lease was 1 s until the leader loop woke at
// expiry deadlines and a new leader gave nodes 2·R to renew with it; its
// Raft timings (cluster.FastControlConfig) replace a lost leader inside it.
func FastConfig() Config {
	return Config{
		Lease:            800 * time.Millisecond,
		RenewEvery:       100 * time.Millisecond,
		MaxDrift:         0.02,
		DrainTimeout:     time.Second,
		MaxMovesInFlight: 32,
		StableFor:        time.Second,
		MinHealth:        0.5,
		ForgetAfter:      DefaultForgetAfter,
		Ring:             ring.DefaultConfig(),
		Load:             LoadConfig{Threshold: 0.25, MinGain: 0.05, SwapsPerMinute: 2, Settle: 5 * time.Second},
	}
}

// DefaultConfig is the default profile of docs/protocol.md: 1.5 s lease,
// 250 ms renewals, δ = 2%, 5 s drain timeout. The lease was 2 s until
// cluster version 4 (see FastConfig).
func DefaultConfig() Config {
	return Config{
		Lease:            1500 * time.Millisecond,
		RenewEvery:       250 * time.Millisecond,
		MaxDrift:         0.02,
		DrainTimeout:     5 * time.Second,
		MaxMovesInFlight: 16,
		StableFor:        3 * time.Second,
		MinHealth:        0.5,
		ForgetAfter:      DefaultForgetAfter,
		Ring:             ring.DefaultConfig(),
		Load:             DefaultLoadConfig(),
	}
}

// SafeConfig is the safe profile of docs/protocol.md: 5 s lease, 1 s
// heartbeats, 20% drift margin, 15 s drain timeout.
func SafeConfig() Config {
	return Config{
		Lease:            5 * time.Second,
		RenewEvery:       time.Second,
		MaxDrift:         0.2,
		DrainTimeout:     15 * time.Second,
		MaxMovesInFlight: 8,
		StableFor:        10 * time.Second,
		MinHealth:        0.5,
		ForgetAfter:      DefaultForgetAfter,
		Ring:             ring.DefaultConfig(),
		Load:             DefaultLoadConfig(),
	}
}

// TestConfig is a small, fast profile for tests and the simulator: 16
// shards, 1 s lease, 200 ms heartbeats.
func TestConfig() Config {
	c := FastConfig()
	// The simulator's sweep, scenarios and mutation seeds run this profile
	// and were tuned with the fast profile's timing before cluster
	// version 4; keep it (the simulator runs the fast profile itself
	// too: simulation.ProfileConfig).
	c.Lease, c.RenewEvery, c.MaxDrift = time.Second, 200*time.Millisecond, 0.1
	c.DrainTimeout = 500 * time.Millisecond
	c.MaxMovesInFlight = 4
	c.StableFor = 500 * time.Millisecond
	c.Ring.Partitions = 16
	c.Load.Settle = time.Second
	c.Load.SwapsPerMinute = 6
	return c
}

// Bounds of the load-balancing settings (LoadConfig).
const (
	MaxLoadThreshold      = 100
	MaxLoadSwapsPerMinute = 1000
)

// Validate checks every field and the cross-field rules; errors wrap
// ErrInvalidConfig and name the bad values. It is the one place the
// ownership settings are checked: node.Config.Validate calls it on the
// configuration the node derives.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Lease <= 0:
		return bad("Lease = %v, want > 0", c.Lease)
	case c.RenewEvery <= 0:
		return bad("RenewEvery = %v, want > 0", c.RenewEvery)
	case c.RenewEvery >= c.Lease/2:
		return bad("RenewEvery = %v, want < Lease/2 = %v", c.RenewEvery, c.Lease/2)
	case math.IsNaN(c.MaxDrift) || c.MaxDrift < 0 || c.MaxDrift >= 0.5:
		return bad("MaxDrift = %v, want in [0, 0.5)", c.MaxDrift)
	case c.DrainTimeout <= 0:
		return bad("DrainTimeout = %v, want > 0", c.DrainTimeout)
	case c.ForgetAfter < 0:
		return bad("ForgetAfter = %v, want ≥ 0 (0: never)", c.ForgetAfter)
	case c.MaxMovesInFlight < 1:
		return bad("MaxMovesInFlight = %d, want ≥ 1", c.MaxMovesInFlight)
	case c.StableFor < 0:
		return bad("StableFor = %v, want ≥ 0", c.StableFor)
	case math.IsNaN(c.MinHealth) || c.MinHealth < 0 || c.MinHealth > 1:
		return bad("MinHealth = %v, want in [0, 1]", c.MinHealth)
	case math.IsNaN(c.Load.Threshold) || c.Load.Threshold < 0 || c.Load.Threshold > MaxLoadThreshold:
		return bad("Load.Threshold = %v, want in [0, %d] (0: off)", c.Load.Threshold, MaxLoadThreshold)
	case math.IsNaN(c.Load.MinGain) || c.Load.MinGain < 0 || c.Load.MinGain >= 1:
		return bad("Load.MinGain = %v, want in [0, 1)", c.Load.MinGain)
	case c.Load.SwapsPerMinute < 0 || c.Load.SwapsPerMinute > MaxLoadSwapsPerMinute:
		return bad("Load.SwapsPerMinute = %d, want in [0, %d]", c.Load.SwapsPerMinute, MaxLoadSwapsPerMinute)
	case c.Load.Threshold > 0 && c.Load.SwapsPerMinute < 1:
		return bad("Load.SwapsPerMinute = %d, want ≥ 1 with Load.Threshold %v", c.Load.SwapsPerMinute, c.Load.Threshold)
	case c.Load.Settle < 0:
		return bad("Load.Settle = %v, want ≥ 0", c.Load.Settle)
	case c.FencedAfter < 0 || (c.FencedAfter != 0 && c.FencedAfter <= c.RenewEvery):
		return bad("FencedAfter = %v, want > RenewEvery = %v (0: 3·RenewEvery)", c.FencedAfter, c.RenewEvery)
	case c.FencedAfter != 0 && c.FencedAfter >= c.ExpireAfter():
		return bad("FencedAfter = %v, want < Lease·(1+MaxDrift) = %v", c.FencedAfter, c.ExpireAfter())
	}
	// The node counts its lease as Lease·(1−δ) from the ask; a renewal
	// period that does not fit twice into that would let one lost heartbeat
	// end the lease.
	if local := scale(c.Lease, 1-c.MaxDrift); c.RenewEvery >= local/2 {
		return bad("RenewEvery = %v, want < Lease·(1−MaxDrift)/2 = %v", c.RenewEvery, local/2)
	}
	if err := c.Ring.Validate(); err != nil {
		return fmt.Errorf("%w: Ring: %w", ErrInvalidConfig, err)
	}
	return nil
}

// nodeLease is how long after its ask a node may act: D·(1−δ) on its own
// clock, which is at most D of real time.
func (c Config) nodeLease() time.Duration { return scale(c.Lease, 1-c.MaxDrift) }

// ExpireAfter is how long the leader waits, on its own clock, after the last
// heartbeat it saw before expiring a node: D·(1+δ), at least D of real time.
func (c Config) ExpireAfter() time.Duration { return scale(c.Lease, 1+c.MaxDrift) }

// establishGrace is how long a new leader gives every node to renew with it
// before it may expire it (Planner.Establish), however long the election
// took: one renewal period to learn of the new leader and one to renew. It
// only delays expiries (liveness), never shortens a wait.
func (c Config) establishGrace() time.Duration { return 2 * c.RenewEvery }

// nodeDrain is how long after first seeing a Revoke a node may keep acting
// to drain: T·(1−δ) on its clock, at most T real.
func (c Config) nodeDrain() time.Duration { return scale(c.DrainTimeout, 1-c.MaxDrift) }

// TakeoverAfter is how long the leader waits after seeing a Revoke before it
// may grant the shard away from an owner that never released:
// (D+T)·(1+δ) on its clock, at least D+T real.
func (c Config) TakeoverAfter() time.Duration {
	return scale(c.Lease+c.DrainTimeout, 1+c.MaxDrift)
}

// fencedAfter is FencedAfter, or its default 3·RenewEvery.
func (c Config) fencedAfter() time.Duration {
	if c.FencedAfter == 0 {
		return 3 * c.RenewEvery
	}
	return c.FencedAfter
}

// speakMax is the newest cluster version this node speaks:
// ledger.MaxClusterVersion, or MaxVersion when set below it.
func (c Config) speakMax() uint32 {
	if c.MaxVersion == 0 {
		return ledger.MaxClusterVersion
	}
	return max(ledger.MinClusterVersion, min(c.MaxVersion, ledger.MaxClusterVersion))
}

func scale(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }
