package ledger

import "github.com/tenurehq/tenure/internal/mutation"

// VersionDisklessMembers is the cluster version from which a node without
// local state (a disk-less member, docs/operations.md) may ask the control
// group for its incarnation with ClaimIncarnation (encoding version 5).
// Before it is active the leader refuses the command before it reaches the
// log: replicas of an older binary could not read it.
const VersionDisklessMembers uint32 = 3

// KindClaimIncarnation is the wire kind of ClaimIncarnation (encoding
// version 5).
const KindClaimIncarnation Kind = 20

// ClaimIncarnation registers a new process of node Node at an incarnation
// the ledger picks: one above the node's recorded incarnation (for an
// unknown node 1, or from VersionForgetNodes on the claim's log index, see
// ForgetNode). A process that keeps no state across restarts (a
// disk-less member) cannot count its own incarnations; the ledger can,
// because every earlier incarnation of the id it ever accepted is in its
// record. Apply is a Heartbeat at that incarnation (liveness epoch +1, so
// every grant of the earlier incarnation dies) and the result's Node is
// the new record: its Incarnation is the process's incarnation. Two
// processes claiming at once get two different incarnations, and the
// lower one is fenced by the higher one's record. A retried claim just
// takes the next number (no harm: the record moves on and the earlier
// claim's process never heartbeats under it).
type ClaimIncarnation struct {
	Node string
	Now  int64
	// MinVersion and MaxVersion are the cluster versions the claiming
	// binary speaks, as in Heartbeat.
	MinVersion, MaxVersion uint32
}

func (ClaimIncarnation) kind() Kind { return KindClaimIncarnation }

func init() {
	register(kindSpec[ClaimIncarnation]{
		kind: KindClaimIncarnation, name: "ClaimIncarnation", since: 5,
		fields: func(cd codec, c ClaimIncarnation) ClaimIncarnation {
			cd.walk(limited{"node", &c.Node}, &c.Now, &c.MinVersion, &c.MaxVersion)
			return c
		},
		apply:     func(f *FSM, index uint64, c ClaimIncarnation) Result { return f.claimIncarnation(index, c) },
		who:       whoSelf,
		authorize: func(a authz, c ClaimIncarnation) error { return a.self("Node", c.Node) },
		// No sessionNow: a session of a claim was always remembered at
		// time 0 (replicated state).
	})
}

func (f *FSM) claimIncarnation(index uint64, c ClaimIncarnation) Result {
	if c.Node == "" {
		return Result{Err: errf(ErrInvalid, "incarnation claim with empty node id")}
	}
	n, known := f.st.Node(c.Node)
	if !f.st.VersionActive(VersionDisklessMembers) && !mutation.On(mutation.GatedWhileMixed) {
		// The leader refuses the command before the log (node's
		// CheckCommand); a replica that meets one anyway rejects it the
		// same way everywhere.
		return Result{Node: n, Err: errf(ErrVersion, "incarnation claims need cluster version %d; the cluster runs %d",
			VersionDisklessMembers, f.st.ActiveVersion())}
	}
	return f.heartbeat(Heartbeat{Node: c.Node, Incarnation: f.st.claimedIncarnation(index, n, known), Now: c.Now,
		MinVersion: c.MinVersion, MaxVersion: c.MaxVersion})
}
