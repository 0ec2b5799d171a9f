package ledger

import "github.com/tenurehq/tenure/internal/mutation"

// VersionForgetNodes is the cluster version from which the control-group
// leader removes the records of nodes gone for good (ForgetNode, encoding
// version 6), and from which an incarnation claim for an id the ledger does
// not know gets the claim's log index as its incarnation (ClaimIncarnation):
// a Deployment that rolls creates a new id per pod, and without it the
// records of the dead ones pile up. Before it is active the leader
// proposes no ForgetNode and the FSM refuses one.
const VersionForgetNodes uint32 = 4

// KindForgetNode is the wire kind of ForgetNode (encoding version 6).
const KindForgetNode Kind = 22

// ForgetNode removes node Node's record: the leader proposes it for a node
// whose liveness it expired long ago and that owns nothing. It is a CAS on
// the record (Incarnation, Liveness, Seq, as ExpireNode), so a heartbeat
// that lands first keeps the node. The FSM refuses it while any shard
// names the node (as owner in any state but unowned, or as a revocation's
// target), and when the record's incarnation is not below the entry's log
// index — which is what makes a later claim safe: a process of the id
// that claims after the forget gets the claim's index, above every
// incarnation the id ever had in the ledger, so fencing tells it from
// every earlier process exactly as before. A forgotten node that
// heartbeats again registers afresh; it owns nothing, so no grant of its
// earlier life can come back.
type ForgetNode struct {
	Node        string
	Incarnation uint64
	Liveness    uint64
	Seq         uint64
	Now         int64
}

func (ForgetNode) kind() Kind { return KindForgetNode }

func init() {
	register(kindSpec[ForgetNode]{
		kind: KindForgetNode, name: "ForgetNode", since: 6,
		fields:    func(cd codec, c ForgetNode) ForgetNode { return ForgetNode(nodeCASFields(cd, ExpireNode(c))) },
		apply:     func(f *FSM, index uint64, c ForgetNode) Result { return f.forgetNode(index, c) },
		who:       whoOperator,
		authorize: operatorOnly[ForgetNode],
		// No sessionNow: a session of a forget was always remembered at
		// time 0 (replicated state).
		touches: func(c ForgetNode) ([]string, []uint32) { return []string{c.Node}, nil },
		format:  func(c ForgetNode) string { return formatNodeCAS("forget", ExpireNode(c)) },
	})
}

func (f *FSM) forgetNode(index uint64, c ForgetNode) Result {
	if !f.st.VersionActive(VersionForgetNodes) && !mutation.On(mutation.GatedWhileMixed) {
		return Result{Err: errf(ErrVersion, "forgetting nodes needs cluster version %d; the cluster runs %d",
			VersionForgetNodes, f.st.ActiveVersion())}
	}
	n, ok := f.st.Node(c.Node)
	if !ok {
		return Result{Err: errf(ErrUnknownNode, "%q", c.Node)}
	}
	if n.Incarnation != c.Incarnation || n.Liveness != c.Liveness || n.Seq != c.Seq {
		return Result{Node: n, Err: errf(ErrConflict, "forget node %q at (inc %d, liveness %d, seq %d), current (%d, %d, %d)",
			c.Node, c.Incarnation, c.Liveness, c.Seq, n.Incarnation, n.Liveness, n.Seq)}
	}
	if n.Incarnation >= index {
		return Result{Node: n, Err: errf(ErrConflict, "forget node %q: incarnation %d is not below the log index %d, so a later claim could not prove itself newer",
			c.Node, n.Incarnation, index)}
	}
	var named *ShardRecord
	f.st.shards.Ascend(func(r ShardRecord) bool {
		if (r.State != ShardUnowned && r.Owner == c.Node) || r.Target == c.Node {
			named = &r
			return false
		}
		return true
	})
	if named != nil {
		return Result{Node: n, Shard: *named, Err: errf(ErrConflict, "forget node %q: shard %d names it (%s, owner %q, target %q)",
			c.Node, named.Shard, named.State, named.Owner, named.Target)}
	}
	f.st.nodes.Delete(n)
	f.dirty |= dirtyNodes | dirtyOwners
	f.feedOwner(n.ID)
	return Result{Node: n}
}

// claimedIncarnation is the incarnation a claim at log index gets for an
// id whose record is n (ok: the ledger has one): one above the record, or
// for an unknown id 1 — and from VersionForgetNodes on, the index, which
// is above every incarnation of a forgotten record (ForgetNode).
func (s *State) claimedIncarnation(index uint64, n NodeRecord, ok bool) uint64 {
	switch {
	case ok:
		return n.Incarnation + 1
	case s.VersionActive(VersionForgetNodes):
		return max(index, 1)
	}
	return 1
}
