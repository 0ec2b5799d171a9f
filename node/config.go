package node

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ownership"
)

// VoterPreference is a node's place in the control group; see Config.Voter.
type VoterPreference = cluster.VoterPreference

// The voter preferences (Config.Voter).
const (
	VoterAuto   = cluster.VoterAuto
	VoterAlways = cluster.VoterAlways
	VoterNever  = cluster.VoterNever
)

// Environment variables DefaultConfig reads. They follow the Kubernetes
// conventions: a pod's HOSTNAME is stable in a StatefulSet.
const (
	// EnvNodeID names the variable that holds the node id (default: HOSTNAME).
	EnvNodeID = "HOSTNAME"
	// EnvGroup names the variable that holds the node's group (CLUSTER_NAME).
	EnvGroup = "CLUSTER_NAME"
)

// Defaults used by DefaultConfig.
const (
	// DefaultGroup is the group of a node whose environment names none.
	DefaultGroup = "default"
	// DefaultCluster is the default Config.Cluster.
	DefaultCluster = "tenure"
	// DefaultPartitions is the default number of shards keys hash onto.
	DefaultPartitions = 271
	// DefaultGossipPort is the default port of the gossip (memberlist) transport.
	DefaultGossipPort = 7946
	// DefaultRaftPort is the default port of the control-group (Raft) transport.
	DefaultRaftPort = 7947
	// DefaultBootstrapExpect is the default number of voters that must see
	// each other before the control group forms.
	DefaultBootstrapExpect = 3
	// DefaultMinHealth is the default minimum health score a node needs to
	// own shards and lead elections.
	DefaultMinHealth = 0.5
)

// Profile names a set of timing parameters (lease, renewal period, drift
// margin, drain timeout) and failure-detection speeds: a row of the profile
// table (profiles.go). See docs/protocol.md.
type Profile string

// The timing profiles. Shorter leases fail over faster and cost more
// heartbeat commits; see Timing for the exact values.
const (
	// ProfileFast: 800 ms lease, 100 ms renewals, 1 s drain. For tests, demos
	// and a LAN with little jitter.
	ProfileFast Profile = "fast"
	// ProfileDefault: 1.5 s lease, 250 ms renewals, 5 s drain.
	ProfileDefault Profile = "default"
	// ProfileSafe: 5 s lease, 1 s renewals, 20% drift margin, 15 s drain. For
	// noisy networks and machines whose clocks may run fast or slow.
	ProfileSafe Profile = "safe"
)

// Timing is the lease timing of a profile (docs/protocol.md, "Timing
// parameters").
type Timing struct {
	// Lease is how long one committed heartbeat lets a node act (D).
	Lease time.Duration
	// RenewEvery is the heartbeat period (R < D/2).
	RenewEvery time.Duration
	// MaxDrift is the assumed bound on clock rate error, as a fraction (δ).
	MaxDrift float64
	// DrainTimeout is how long an owner may keep acting on a revoked shard
	// to drain it (T).
	DrainTimeout time.Duration
}

// Config configures a Node. Start it from DefaultConfig, which reads the
// node's identity from the environment, and override fields as needed.
// The zero value of an optional field means "use the default".
type Config struct {
	// NodeID is the node's stable identity. It must be unique in the
	// cluster and survive restarts (it is persisted in DataDir).
	// DefaultConfig takes it from $HOSTNAME.
	NodeID string
	// Group is the group the node belongs to; group-scoped elections and
	// GroupPosition count only the members of one group. DefaultConfig
	// takes it from $CLUSTER_NAME, else DefaultGroup.
	Group string

	// Cluster names the cluster. Gossip refuses nodes of another cluster
	// (it is memberlist's packet label), so two clusters can share a
	// network. Nodes of different Groups share one Cluster. Default
	// DefaultCluster.
	Cluster string

	// Seeds are gossip addresses (host:port) of nodes to join. Empty means
	// "start a new cluster": only valid with BootstrapExpect == 1.
	Seeds []string
	// BootstrapExpect is the number of control-group voters that must see
	// each other before the control group forms (as in Consul and Nomad).
	// 1 starts a single-node cluster; use 3 or 5 in production.
	BootstrapExpect int
	// DataDir holds the node's identity, incarnation counter, Raft log and
	// snapshots. Required unless Network is set (in-memory
	// storage) or the node is a disk-less member (Diskless).
	DataDir string
	// Diskless runs the node as a disk-less member (docs/operations.md,
	// "Disk-less members"): it keeps nothing across restarts — Raft log
	// and snapshots in memory, its ledger replica rebuilt from the
	// control group at every start, its incarnation claimed from the
	// control group — so it needs no volume (a Kubernetes Deployment). It
	// must never vote: Voter must be VoterNever. It is implied on a real
	// network when DataDir is empty and Voter is VoterNever; set it with
	// Network to give the node fresh storage at every start. It needs
	// a cluster at version ledger.VersionDisklessMembers or newer
	// (ErrDisklessUnsupported).
	Diskless bool

	// Profile selects the lease timing; see Profile.
	Profile Profile
	// Partitions is the number of shards keys hash onto. It must be the same
	// on every node and must not change over a cluster's life.
	Partitions int
	// MinHealth is the health score (0..1) below which a node gives up its
	// shards and elections and is not given new ones.
	MinHealth float64

	// GossipAddr is the host:port the gossip transport binds to.
	GossipAddr string
	// GossipAdvertise is the host:port other nodes reach the gossip
	// transport at; empty means GossipAddr (which then must not be a
	// wildcard address).
	GossipAdvertise string
	// RaftAddr is the host:port the control-group transport binds to.
	RaftAddr string
	// RaftAdvertise is the host:port other nodes reach the Raft transport
	// at; empty means RaftAddr.
	RaftAdvertise string
	// HTTPAddr, if set, is gossiped to other nodes so tools can find this
	// node's HTTP API. The node does not listen on it.
	HTTPAddr string

	// EncryptionKey, if set, encrypts and authenticates gossip with
	// AES-GCM (16, 24 or 32 bytes). Every node of a cluster needs the same
	// key. Required when GossipAddr or GossipAdvertise is not a loopback
	// address, unless Insecure: without it any process that reaches a seed
	// joins. A keyring installed at run time (Node.InstallKey) is kept in
	// DataDir and takes precedence over this key on restart.
	EncryptionKey []byte
	// Voter is this node's place in the control group (docs/control-group.md,
	// "Voter placement"): VoterAuto ("", the default) lets the control
	// group promote it when it needs voters, lowest id first; VoterAlways
	// puts it first in line (as a bootstrap voter and for promotion);
	// VoterNever keeps it a non-voter for good — it is never a bootstrap
	// voter nor promoted, and a voter restarted with it is demoted once a
	// replacement has caught up. A cluster needs at least BootstrapExpect
	// nodes that are not VoterNever. The preference is gossiped, so
	// whichever node leads honours it.
	Voter VoterPreference
	// VoterOwnsNoShards keeps this node from owning shards (and group
	// election shards) while it is a control-group voter: the leader
	// revokes them, gracefully, when it is promoted and grants it none
	// until it is a non-voter again. Set it on every node that may vote so
	// that a voter's death is only ever a control-group failure (an
	// election, a few hundred ms) and never also an owner failure (a
	// lease of waiting): the two failure paths stay apart. It costs the
	// voters' capacity — with 3 voters and 2 members only the 2 members do
	// work, and a cluster of only voters owns nothing.
	VoterOwnsNoShards bool
	// Standbys is how many voter-capable nodes (Voter not VoterNever) the
	// control-group leader keeps as Raft non-voters once members follow the
	// committed-state stream (cluster version 5), so that a lost voter is
	// replaced at once; the other non-voters follow the stream (0: 2; a
	// negative value: none). Read by whichever node leads: give every
	// voter-capable node the same value.
	Standbys int

	// Weight is the node's capacity relative to the others, 1..MaxWeight
	// (0 means 1): the planner gives it a share of the partitions
	// proportional to it (ring.Assign's weighted quotas). Gossiped in the
	// "tenure.weight" tag.
	Weight int
	// Zone is the node's failure domain (a rack, an availability zone): the
	// partitions are apportioned to zones by their total weight, and a
	// group's elections spread across zones where possible. Empty: no
	// zone. Gossiped in the "tenure.zone" tag; at most 64 bytes of
	// letters, digits, '.', '_' and '-'.
	Zone string

	// LoadThreshold, LoadSwapsPerMinute and LoadSettle tune load-aware
	// placement (ownership.LoadConfig; docs/ring.md), on the node that
	// leads the control group: a member whose gossiped load (ReportLoad)
	// exceeds (1+LoadThreshold)·its share gets a hot shard swapped away,
	// at most LoadSwapsPerMinute swaps a minute, each after the placement
	// has been settled for LoadSettle. Zero values take the profile's
	// (0.25, 2, 15 s; 5 s in ProfileFast); a negative LoadThreshold turns
	// load balancing off. Networked nodes only.
	LoadThreshold      float64
	LoadSwapsPerMinute int
	LoadSettle         time.Duration

	// Tags are free-form labels gossiped with the node (region, version...).
	// Keys starting "tenure." or "health." are reserved.
	Tags map[string]string

	// JobTimeout bounds one job attempt: after it, the shard's owner may
	// start the job again (DefaultJobTimeout if 0).
	JobTimeout time.Duration
	// MaxPendingJobs caps the pending jobs of one shard: Enqueue of a new
	// job on a shard that holds this many fails with ErrQueueFull (0: no
	// cap). From cluster version 5 the cap travels in the enqueue command
	// and the ledger decides it on the committed state, so it is exact
	// under concurrent enqueues through several nodes; before, each node
	// checks its own replica before proposing (advisory). Nodes may be
	// configured differently: each enqueue carries its node's cap.
	MaxPendingJobs int

	// StateMachines are the application state machines every node applies
	// committed application commands to, keyed by command type. They must
	// be registered before Start because the node replays the log into them
	// as it starts. See StateMachine.
	StateMachines map[string]StateMachine

	// Network, if set, runs the node's real backend (gossip, Raft,
	// ledger, planner) over an in-process network with in-memory storage:
	// many real nodes in one process, also inside testing/synctest.
	// DataDir is then ignored, and empty or wildcard addresses are
	// assigned by the network. Use it for tests and examples; see
	// MemNetwork.
	Network *MemNetwork

	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger

	// TLSCAFile, TLSCertFile and TLSKeyFile are PEM files: the cluster's CA
	// bundle and this node's certificate and key (`tenure tls init`). The
	// certificate must name this node (NodeID). With them, the control-group
	// port speaks only mutual TLS: every peer proves its node id, which
	// must match the id it claims, and may propose only commands about
	// itself (docs/security.md). The files are re-read when they change, so
	// certificates rotate without a restart. Required when RaftAddr or
	// RaftAdvertise is not a loopback address, unless Insecure.
	TLSCAFile   string
	TLSCertFile string
	TLSKeyFile  string
	// Insecure lets a node listen off loopback without TLS on the control
	// group and without a gossip key: anyone who reaches its ports can join
	// and commit any command. Only for networks where every reachable
	// process is trusted; the node logs a warning at start.
	Insecure bool

	// ManualFinalize keeps the cluster version where it is after every
	// node runs a newer binary, until an operator finalizes (`tenure
	// upgrade finalize`, Node.FinalizeUpgrade): until then any node may go
	// back to the previous binary. By default the control-group leader
	// finalizes as soon as every node holding a lease speaks the newer
	// version. Finalizing is irreversible (docs/upgrades.md).
	ManualFinalize bool

	// FencedAfter is how long the control-group leader waits without a
	// heartbeat from the owner of a shard under fenced takeover
	// (Node.SetFencedTakeover) before granting it to a successor; gossip
	// reporting the owner dead ends the wait sooner. 0 is 3 heartbeat
	// periods of the profile; otherwise it must exceed one heartbeat
	// period and stay below the lease's expiry wait. Shorter fails over
	// faster and moves fenced shards off an owner that is only slow more
	// often. Only the leader's value is used.
	FencedAfter time.Duration

	// speakMax, if non-zero, caps the cluster versions this node
	// advertises below ledger.MaxClusterVersion: in tests, a node standing
	// in for a binary of an older release (mixed-version tests).
	speakMax uint32
}

// DefaultConfig returns the default configuration with the node's identity
// taken from the environment: NodeID from $HOSTNAME, Group from
// $CLUSTER_NAME (else DefaultGroup). Seeds and DataDir stay empty.
func DefaultConfig() Config {
	return ConfigFromEnv(os.Getenv)
}

// ConfigFromEnv is DefaultConfig with a custom environment lookup, for
// callers that keep their identity under other variable names.
func ConfigFromEnv(getenv func(string) string) Config {
	c := Config{
		NodeID:          strings.TrimSpace(getenv(EnvNodeID)),
		Group:           strings.TrimSpace(getenv(EnvGroup)),
		BootstrapExpect: DefaultBootstrapExpect,
		Profile:         ProfileDefault,
		Partitions:      DefaultPartitions,
		MinHealth:       DefaultMinHealth,
		GossipAddr:      fmt.Sprintf("0.0.0.0:%d", DefaultGossipPort),
		RaftAddr:        fmt.Sprintf("0.0.0.0:%d", DefaultRaftPort),
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	return c
}

// withDefaults fills optional zero fields.
func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.Profile == "" {
		c.Profile = ProfileDefault
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.JobTimeout == 0 {
		c.JobTimeout = DefaultJobTimeout
	}
	if c.BootstrapExpect == 0 {
		c.BootstrapExpect = 1
		if len(c.Seeds) > 0 {
			c.BootstrapExpect = DefaultBootstrapExpect
		}
	}
	return c
}

// MaxWeight bounds Config.Weight.
const MaxWeight = 1000

// maxIDLen bounds ids and group names so gossip metadata stays within
// memberlist's 512-byte limit.
const maxIDLen = 64

// Validate reports every bad value of c in one error that names them. Start
// calls it; call it yourself to check flags early.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if err := validName(c.NodeID); err != nil {
		bad("NodeID %q: %v (set $%s or Config.NodeID)", c.NodeID, err, EnvNodeID)
	}
	if err := validName(c.Group); err != nil {
		bad("Group %q: %v", c.Group, err)
	}
	if err := validName(c.Cluster); err != nil {
		bad("Cluster %q: %v", c.Cluster, err)
	}
	_, profileOK := c.Profile.Timing()
	if !profileOK {
		bad("Profile %q: want %q, %q or %q", c.Profile, ProfileFast, ProfileDefault, ProfileSafe)
	}
	partitionsOK := c.Partitions >= 1 && c.Partitions <= 1<<16
	if !partitionsOK {
		bad("Partitions %d: want 1..65536", c.Partitions)
	}
	if profileOK && partitionsOK {
		// MinHealth and the load-balancing settings: the ownership layer's
		// rule, on the configuration this node runs with.
		if err := ownershipConfig(c).Validate(); err != nil {
			bad("%s", strings.TrimPrefix(err.Error(), ownership.ErrInvalidConfig.Error()+": "))
		}
	}
	if c.BootstrapExpect < 1 || c.BootstrapExpect > 7 {
		bad("BootstrapExpect %d: want 1..7 (3 or 5 in production)", c.BootstrapExpect)
	}
	if c.Weight < 0 || c.Weight > MaxWeight {
		bad("Weight %d: want 1..%d (0: 1)", c.Weight, MaxWeight)
	}
	if c.Zone != "" {
		if err := validName(c.Zone); err != nil {
			bad("Zone %q: %v", c.Zone, err)
		}
	}
	if c.JobTimeout < 0 {
		bad("JobTimeout %v: want > 0", c.JobTimeout)
	}
	if c.MaxPendingJobs < 0 {
		bad("MaxPendingJobs %d: want >= 0 (0: no cap)", c.MaxPendingJobs)
	}
	if _, err := cluster.ParseVoterPreference(string(c.Voter)); err != nil {
		bad("Voter %q: want %q, %q or %q", c.Voter, VoterAuto, VoterAlways, VoterNever)
	}
	if n := len(c.EncryptionKey); n != 0 && !gossipKeySize(n) {
		bad("EncryptionKey of %d bytes: want 16, 24 or 32", n)
	}
	for _, k := range sortedKeys(c.Tags) {
		if k == "" || len(k)+len(c.Tags[k]) > 128 {
			bad("Tags[%q]: key must be non-empty and key+value at most 128 bytes", k)
		}
		if strings.HasPrefix(k, "tenure.") || strings.HasPrefix(k, healthTagPrefix) {
			bad("Tags[%q]: the prefixes \"tenure.\" and %q are reserved", k, healthTagPrefix)
		}
	}
	for _, k := range sortedKeys(c.StateMachines) {
		if k == "" || len(k) > 255 {
			bad("StateMachines[%q]: type must be 1..255 bytes", k)
		}
		if c.StateMachines[k] == nil {
			bad("StateMachines[%q] is nil", k)
		}
	}
	if c.Network != nil {
		errs = append(errs, c.Network.validate(c)...)
	}
	c.validateTLS(bad)
	c.validateGossipKey(bad)
	c.validateDiskless(bad)
	checkAddr := func(field, v string, required bool) {
		if v == "" {
			if required {
				bad("%s empty: want host:port", field)
			}
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad("%s %q: %v", field, v, err)
		}
	}
	if c.Network == nil {
		if c.DataDir == "" && !c.diskless() {
			bad("DataDir empty: a node that may vote (Voter %q) needs a directory for its identity, Raft log and vote; set DataDir, or Voter=%q to run as a disk-less member (or set Network for in-memory tests)",
				cmp.Or(string(c.Voter), string(VoterAuto)), VoterNever)
		}
		checkAddr("GossipAddr", c.GossipAddr, true)
		checkAddr("GossipAdvertise", c.GossipAdvertise, false)
		checkAddr("RaftAddr", c.RaftAddr, true)
		checkAddr("RaftAdvertise", c.RaftAdvertise, false)
		if host, _, err := net.SplitHostPort(c.RaftAddr); err == nil && c.RaftAdvertise == "" {
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				bad("RaftAdvertise empty with wildcard RaftAddr %q: peers need an address to reach this node's control group", c.RaftAddr)
			}
		}
	}
	checkAddr("HTTPAddr", c.HTTPAddr, false)
	for i, s := range c.Seeds {
		checkAddr(fmt.Sprintf("Seeds[%d]", i), s, true)
	}
	if len(errs) == 0 {
		return nil
	}
	return &ConfigError{Errs: errs}
}

// ConfigError lists every bad value Validate found. errors.Is(err,
// ErrInvalidConfig) matches it.
type ConfigError struct {
	Errs []error
}

// Error joins the problems into one line.
func (e *ConfigError) Error() string {
	parts := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		parts[i] = err.Error()
	}
	return "node: invalid config: " + strings.Join(parts, "; ")
}

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns the individual problems.
func (e *ConfigError) Unwrap() []error { return e.Errs }

func validName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > maxIDLen:
		return fmt.Errorf("longer than %d bytes", maxIDLen)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '/' {
			return fmt.Errorf("contains %q (want printable characters without spaces or '/')", r)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
