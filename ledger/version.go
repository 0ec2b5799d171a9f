package ledger

import (
	"fmt"

	"github.com/tenurehq/tenure/internal/mutation"
)

// Cluster versions (docs/upgrades.md). A binary speaks the cluster versions
// MinClusterVersion..MaxClusterVersion; the ledger records the cluster's
// active version (ClusterConfig). Every command, encoding, RPC or rule
// newer than version 1 is used only once the active version allows it (the
// proposer checks, State.VersionActive); a replica applies every entry its
// binary can read and halts on one it cannot (FSM.HaltedAt).
const (
	// MinClusterVersion is the oldest cluster version this binary can run
	// in.
	MinClusterVersion uint32 = 1
	// MaxClusterVersion is the newest cluster version this binary speaks.
	// Version 2: retried commands carry request ids (Session, encoding
	// version 4; VersionRequestIDs). Version 3: operator placement rules
	// (PinShard, ExcludeNode; VersionPlacementRules), jobs on the log's
	// clock (VersionLogTime) and disk-less members that claim their
	// incarnation from the ledger (ClaimIncarnation;
	// VersionDisklessMembers): encoding and snapshot version 5. Version
	// 4: fenced takeover (SetTakeoverPolicy; VersionFencedTakeover), the
	// settings Apply judges with from the log (LogSettings;
	// VersionLogSettings) and the leader forgetting the records of nodes
	// gone for good (ForgetNode; VersionForgetNodes): encoding and snapshot
	// version 6; lease renewals off the log (VersionLeaseRenewals; no new
	// command or encoding). Version 5 (this round; each change names its
	// own gate constant): the jobs API contract (VersionJobsAPI): the
	// pending-jobs cap decided by the FSM and request ids bound to their
	// request's body: encoding and snapshot version 7; members follow the
	// committed-state stream instead of Raft (VersionStreamMembers; no new
	// command or encoding); least privilege (the FSM refuses a
	// ClusterConfig no registered node speaks instead of halting on it;
	// VersionLeastPrivilege, no new encoding). Version 6: the handoff on
	// the old owner's word (VersionHandoffWords; no new command or
	// encoding: the leader relays the old owner's Transfer to its target
	// over the Control.Words RPC, and the FSM burns e+1 when a shard
	// revoked toward a target leaves its owner other than by the
	// Transfer).
	MaxClusterVersion uint32 = 6
)

// VersionLeaseRenewals is the cluster version from which nodes renew their
// leases with the control-group leader, confirmed by a quorum round, instead
// of committing a Heartbeat every RenewEvery (docs/protocol.md). Heartbeats
// stay for registration (a new incarnation, rejoining after an expiry, a
// changed version range); from this version on their acks no longer extend
// a lease. It adds no command and no encoding.
const VersionLeaseRenewals uint32 = 4

// VersionLogTime is the cluster version from which job transitions (not
// before, timeouts, finish times, retention) use the log's clock instead of
// the proposer's: the time the control-group leader appended the entry
// (raft's Log.AppendedAt), made monotonic by the FSM (the maximum so far,
// State.LogTime). Every replica reads the same value from the log, and a
// proposer's wall clock no longer matters: a node 25 h ahead cannot prune
// idempotency keys, and a clock step on the starting node cannot restart a
// running attempt. Before it is active the FSM uses command Now as before.
const VersionLogTime uint32 = 3

// KindClusterConfig is the wire kind of ClusterConfig (encoding version 3).
const KindClusterConfig Kind = 16

// ClusterConfig records what every node of a cluster must agree on — its
// name and partition count, set once — and raises the active cluster
// version. The control-group leader commits it when it first leads a
// cluster without one (at the highest version every live node speaks),
// and again to finalize an upgrade. The version never goes down.
type ClusterConfig struct {
	Name       string
	Partitions uint32
	Version    uint32
	Now        int64
}

func (ClusterConfig) kind() Kind { return KindClusterConfig }

func init() {
	register(kindSpec[ClusterConfig]{
		kind: KindClusterConfig, name: "ClusterConfig", since: 3,
		fields: func(cd codec, c ClusterConfig) ClusterConfig {
			cd.walk(limited{"name", &c.Name}, &c.Partitions, &c.Version, &c.Now)
			return c
		},
		apply:      func(f *FSM, _ uint64, c ClusterConfig) Result { return f.clusterConfig(c) },
		who:        whoOperator,
		authorize:  authorizeClusterConfig,
		sessionNow: func(c ClusterConfig) int64 { return c.Now },
	})
}

// ClusterInfo is the committed ClusterConfig (zero before any: a cluster
// that runs at version 1 and has not recorded its name yet).
type ClusterInfo struct {
	Name       string
	Partitions uint32
	// Version is the active cluster version (0 is read as 1).
	Version uint32
	// FinalizedAt is the proposer clock (unix ns) of the last raise.
	FinalizedAt int64
}

// Cluster returns the committed cluster configuration.
func (s *State) Cluster() ClusterInfo { return s.cluster }

// ActiveVersion is the cluster's active version (1 before any
// ClusterConfig).
func (s *State) ActiveVersion() uint32 { return max(s.cluster.Version, 1) }

// VersionActive reports whether the cluster runs at version v or newer:
// a proposer uses what version v introduced only then.
func (s *State) VersionActive(v uint32) bool { return s.ActiveVersion() >= v }

// SpeakRange returns the cluster versions n's binary speaks, from its last
// heartbeat (a binary older than cluster versions speaks 1 only).
func (n NodeRecord) SpeakRange() (lo, hi uint32) {
	if n.MaxVersion == 0 {
		return 1, 1
	}
	return max(n.MinVersion, 1), n.MaxVersion
}

// Speaks reports whether n's binary can run at cluster version v.
func (n NodeRecord) Speaks(v uint32) bool {
	lo, hi := n.SpeakRange()
	return lo <= v && v <= hi
}

func (f *FSM) clusterConfig(c ClusterConfig) Result {
	cur := f.st.cluster
	switch {
	case c.Name == "" || c.Partitions == 0:
		return Result{Err: errf(ErrInvalid, "cluster config with name %q and %d partitions: both are required", c.Name, c.Partitions)}
	case c.Version < 1:
		return Result{Err: errf(ErrInvalid, "cluster version %d: want ≥ 1", c.Version)}
	case refuseUnspoken(c, f.entrySpoken) != nil:
		return Result{Err: refuseUnspoken(c, f.entrySpoken)}
	case cur.Name != "" && (c.Name != cur.Name || c.Partitions != cur.Partitions):
		return Result{Err: errf(ErrInvalid, "cluster config %q with %d partitions: the cluster is %q with %d partitions",
			c.Name, c.Partitions, cur.Name, cur.Partitions)}
	case c.Version < cur.Version && !mutation.On(mutation.ClusterVersionDown):
		return Result{Err: errf(ErrInvalid, "cluster version %d: the cluster runs %d, and versions never go down", c.Version, cur.Version)}
	case cur.Name != "" && c.Version == cur.Version:
		return Result{Duplicate: true}
	}
	f.st.cluster = ClusterInfo{Name: c.Name, Partitions: c.Partitions, Version: c.Version, FinalizedAt: c.Now}
	return Result{}
}

// checkSpeaks refuses a heartbeat from a binary that cannot run at the
// cluster's active version: it must not act in this cluster.
func (f *FSM) checkSpeaks(c Heartbeat) error {
	v := f.st.ActiveVersion()
	rec := NodeRecord{MinVersion: c.MinVersion, MaxVersion: c.MaxVersion}
	if rec.Speaks(v) {
		return nil
	}
	lo, hi := rec.SpeakRange()
	return errf(ErrVersion, "node %q speaks cluster versions %d to %d; the cluster runs version %d", c.Node, lo, hi, v)
}

// unreadable reports why this binary cannot apply c although it decodes
// (a cluster version newer than readable, the newest it applies:
// Config.readable), or nil.
func unreadable(c Command, readable uint32) error {
	switch c := c.(type) {
	case ClusterConfig:
		if c.Version > readable {
			return fmt.Errorf("%w: cluster version %d (this binary speaks %d to %d)", ErrVersion, c.Version, MinClusterVersion, readable)
		}
	case Session:
		return unreadable(c.Command, readable)
	case Batch:
		for _, sc := range c.Commands {
			if err := unreadable(sc, readable); err != nil {
				return err
			}
		}
	}
	return nil
}

// VersionTarget is the newest cluster version every one of nodes speaks,
// capped at this binary's MaxClusterVersion, with the ids of the nodes that
// hold it below MaxClusterVersion (sorted as given). Pass the nodes that
// count: those that hold a lease. It is the one place that decides how far
// a cluster may be finalized; the leader's planner and `tenure upgrade
// status` both call it.
func VersionTarget(nodes []NodeRecord) (target uint32, blockers []string) {
	target = MaxClusterVersion
	for _, n := range nodes {
		if _, hi := n.SpeakRange(); hi < MaxClusterVersion {
			blockers = append(blockers, n.ID)
			target = min(target, hi)
		}
	}
	return target, blockers
}
