package node

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// Revocation is one entry of the committed deny-list (RevokeNode): a node
// id, a certificate serial (lowercase hex), or both.
type Revocation struct {
	Node   string
	Serial string
	Reason string
	At     time.Time
}

// RevokeNode puts node (an id), serial (a certificate serial in hex; ""
// for none) or both on the committed deny-list, or takes that entry off
// with lift. Every node then refuses the revoked peer's connections at
// their handshake and closes its open ones at their next use; the planner
// moves its shards away and its renewals and heartbeats are refused
// (docs/security.md, "Revoking a node"). An operator action: the leader
// accepts it from an operator certificate or a voter-capable node's
// (an admin request to its API). It returns once the entry is committed.
//
// Errors: ErrVersionInactive before cluster version 5
// (ledger.VersionRevocation) is finalized; ErrInvalid with neither a node
// nor a serial; ErrNoQuorum; ErrUnsupported on an in-memory network.
func (n *Node) RevokeNode(ctx context.Context, node, serial, reason string, lift bool) error {
	if node == "" && ledger.NormalizeSerial(serial) == "" {
		return fmt.Errorf("%w: revoke: a node id or a certificate serial is needed", ErrInvalid)
	}
	return n.gatedRule(ctx, ledger.VersionRevocation, "revoking nodes",
		ledger.RevokeNode{Node: node, Serial: ledger.NormalizeSerial(serial), Reason: reason, Lift: lift, Now: time.Now().UnixNano()})
}

// Revocations returns the committed deny-list as this node's replica
// knows it, sorted by node then serial. ErrUnsupported on an in-memory
// network.
func (n *Node) Revocations() ([]Revocation, error) {
	ub, err := n.replica("revocations")
	if err != nil {
		return nil, err
	}
	var out []Revocation
	for _, r := range ub.ledgerState().Revocations() {
		out = append(out, Revocation{Node: r.Node, Serial: r.Serial, Reason: r.Reason, At: time.Unix(0, r.At)})
	}
	return out, nil
}

// gatedRule commits operator command c once cluster version v is active
// (gate), its ledger error mapped.
func (n *Node) gatedRule(ctx context.Context, v uint32, what string, c ledger.Command) error {
	ub, err := n.gate(v, what)
	if err != nil {
		return err
	}
	r, err := ub.commitCommand(ctx, c)
	if err == nil {
		err = r.Err
	}
	return mapLedgerErr(err)
}

// gate is the one check of the operator's version-gated rules (revoking
// nodes, fenced takeover, pins and exclusions) before one is committed:
// ErrClosed, ErrUnsupported on an in-memory network, ErrVersionInactive
// until cluster version v is active (what names the rule); else the
// backend to commit through.
func (n *Node) gate(v uint32, what string) (upgradeBackend, error) {
	if n.isClosed() {
		return nil, ErrClosed
	}
	ub, err := n.replica(what)
	if err != nil {
		return nil, err
	}
	if st := ub.ledgerState(); !st.VersionActive(v) {
		return nil, fmt.Errorf("%w: %s needs cluster version %d, the cluster runs %d (finalize the upgrade first: tenure upgrade status)",
			ErrVersionInactive, what, v, st.ActiveVersion())
	}
	return ub, nil
}

// replica returns the backend that holds a ledger replica: the cluster
// versions and the operator's rules are read and committed through it.
// ErrUnsupported (naming what) on an in-memory network, which has none.
func (n *Node) replica(what string) (upgradeBackend, error) {
	ub, ok := n.be.(upgradeBackend)
	if !ok {
		return nil, fmt.Errorf("%w: %s on an in-memory network", ErrUnsupported, what)
	}
	return ub, nil
}
