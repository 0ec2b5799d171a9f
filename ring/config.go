package ring

import (
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (match with errors.Is) and names the offending value in its text.
var (
	// ErrInvalidConfig: a Config field is out of range (Validate).
	ErrInvalidConfig = errors.New("ring: invalid config")
	// ErrInvalidMember: a member name is empty or a weight is negative, NaN
	// or infinite.
	ErrInvalidMember = errors.New("ring: invalid member")
	// ErrDuplicateMember: the same member name appears twice.
	ErrDuplicateMember = errors.New("ring: duplicate member")
	// ErrTooManyMembers: more members than partitions (consistent v0.10.0
	// panics; every member could not get a partition anyway), or more
	// virtual nodes than MaxVirtualNodes.
	ErrTooManyMembers = errors.New("ring: too many members")
	// ErrNoRoom: the library's per-member cap would leave too little room
	// for every shard (consistent v0.10.0 panics with "not enough room to
	// distribute partitions"). New avoids this by raising the cap to
	// ceil(P/N) (see Config.MaxLoadFor), so it is only a guard.
	ErrNoRoom = errors.New("ring: not enough room to distribute partitions")
	// ErrHashCollision: two virtual nodes of different members hash to the
	// same ring position (consistent v0.10.0 would silently let one member
	// shadow the other). Renaming one member fixes it.
	ErrHashCollision = errors.New("ring: virtual node hash collision")
	// ErrInternal: the underlying library panicked anyway; the panic value
	// is in the error text. Please report it.
	ErrInternal = errors.New("ring: internal error")
)

// Defaults and limits.
const (
	// DefaultPartitions is 1024: enough shards that one shard is under 1% of
	// the work up to ~100 nodes, small enough that a full ring build stays
	// in the low milliseconds and a ledger table of owners stays tiny.
	DefaultPartitions = 1024
	// DefaultLoad is 1.25: no member gets more than ceil(floor(P/N)·1.25)
	// shards. This is the bounded-load paper's usual ε = 0.25; lower values
	// make joins and leaves move more shards, higher ones allow hot members.
	DefaultLoad = 1.25
	// DefaultReplicationFactor is 100 virtual nodes per member (positions
	// on the hash circle, not data replicas). The library's default of 20
	// leaves the raw circle so uneven that the load bound overflows often,
	// and every overflow cascades into extra moves on join/leave: measured
	// (docs/ring.md) at P=1024..4096, RF 20 moves 1.1–3.0× the optimum,
	// RF 100 0.9–1.9×. Build cost grows as N²·RF (~100 ms at N=100).
	DefaultReplicationFactor = 100

	// MaxPartitions bounds Partitions so that a bad config cannot make the
	// owner table use unbounded memory.
	MaxPartitions = 1 << 20
	// MaxReplicationFactor bounds ReplicationFactor.
	MaxReplicationFactor = 1024
	// MaxVirtualNodes bounds members × ReplicationFactor.
	MaxVirtualNodes = 1 << 22
	// MaxLoad bounds Load; anything above it is effectively unbounded
	// consistent hashing already.
	MaxLoad = 1 << 20

	// DefaultMinLoad is 0.6: the least loaded member gets at least 60% of
	// the average. The library alone leaves members with 0–40% at 50–100
	// members; floors of 0.6–0.65 cost ~0.0–0.15× the optimum in extra
	// moves, while 0.8 costs up to ~0.4× (docs/ring.md).
	DefaultMinLoad = 0.6
)

// Config sets up a ring. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Partitions is the number of shards P; keys map to shards with
	// ShardFor. 1 ≤ Partitions ≤ MaxPartitions. Changing it remaps almost
	// every key.
	Partitions int
	// Load is the bounded-load factor: no member owns more than
	// MaxLoadFor(N) = max(ceil(floor(P/N)·Load), ceil(P/N)) ≤ ceil(P/N·Load)
	// shards. Finite, 1 ≤ Load ≤ MaxLoad. Load = 1 gives perfect balance
	// but moves many more shards on joins and leaves.
	Load float64
	// ReplicationFactor is the number of virtual nodes per member on the
	// hash circle. 2 ≤ ReplicationFactor ≤ MaxReplicationFactor
	// (consistent v0.10.0 can fail to place a shard with 1).
	ReplicationFactor int
	// MinLoad is the floor of the second placement pass (see New): every
	// member is raised to at least floor(P/N · MinLoad) shards, taken from
	// members above that floor. 0 ≤ MinLoad ≤ 1; 0 disables the pass.
	// Higher values even out the minimum but move more shards on joins and
	// leaves (docs/ring.md has the measurements).
	MinLoad float64
}

// DefaultConfig returns 1024 partitions, load 1.25, 100 virtual nodes per
// member and a min-load floor of 0.6; see the Default constants for why.
func DefaultConfig() Config {
	return Config{
		Partitions:        DefaultPartitions,
		Load:              DefaultLoad,
		ReplicationFactor: DefaultReplicationFactor,
		MinLoad:           DefaultMinLoad,
	}
}

// Validate checks every field on its own. New also checks the fields against
// the member set. Errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return fmt.Errorf("%w: Partitions = %d, want 1..%d", ErrInvalidConfig, c.Partitions, MaxPartitions)
	}
	if math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1 || c.Load > MaxLoad {
		return fmt.Errorf("%w: Load = %v, want a finite number in [1, %d]", ErrInvalidConfig, c.Load, MaxLoad)
	}
	if c.ReplicationFactor < 2 || c.ReplicationFactor > MaxReplicationFactor {
		return fmt.Errorf("%w: ReplicationFactor = %d, want 2..%d", ErrInvalidConfig, c.ReplicationFactor, MaxReplicationFactor)
	}
	if math.IsNaN(c.MinLoad) || c.MinLoad < 0 || c.MinLoad > 1 {
		return fmt.Errorf("%w: MinLoad = %v, want a number in [0, 1]", ErrInvalidConfig, c.MinLoad)
	}
	return nil
}

// ShardFor maps a key to its shard: xxhash64(key) mod partitions. It is the
// same function consistent uses for keys. It does not allocate. partitions
// must be ≥ 1; for partitions ≤ 0 it returns 0 rather than panicking.
func ShardFor(partitions int, key []byte) uint32 {
	if partitions <= 0 {
		return 0
	}
	return uint32(xxhash.Sum64(key) % uint64(partitions))
}

// ShardFor maps a key to its shard under c (see the package-level ShardFor).
func (c Config) ShardFor(key []byte) uint32 { return ShardFor(c.Partitions, key) }
