package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/ledger"
)

// UpgradeStatus is the cluster version as this node's replica sees it
// (docs/upgrades.md); NodeVersions is one registered node's supported
// versions. They are the HTTP API's types (GET /v1/upgrade), declared once
// in apitypes.
type (
	UpgradeStatus = apitypes.UpgradeStatus
	NodeVersions  = apitypes.NodeVersions
)

// upgradeBackend is the part of a backend that has a ledger replica.
type upgradeBackend interface {
	ledgerState() *ledger.State
	commitCommand(ctx context.Context, c ledger.Command) (ledger.Result, error)
}

func (b *netBackend) ledgerState() *ledger.State { return b.fsm.State() }

func (b *netBackend) commitCommand(ctx context.Context, c ledger.Command) (ledger.Result, error) {
	return b.commitRetry(ctx, c, nil)
}

// UpgradeStatus reports the cluster version, what each node speaks and what
// blocks finalizing. ErrUnsupported on the in-memory network.
func (n *Node) UpgradeStatus() (UpgradeStatus, error) {
	ub, err := n.replica("cluster versions")
	if err != nil {
		return UpgradeStatus{}, err
	}
	return n.upgradeStatus(ub.ledgerState()), nil
}

func (n *Node) upgradeStatus(st *ledger.State) UpgradeStatus {
	live := map[string]bool{}
	for _, id := range n.be.liveNodes() {
		live[id] = true
	}
	ci := st.Cluster()
	us := UpgradeStatus{Active: st.ActiveVersion(), BinaryMin: ledger.MinClusterVersion, BinaryMax: ledger.MaxClusterVersion,
		ManualFinalize: n.cfg.ManualFinalize, Nodes: []NodeVersions{}}
	if ci.FinalizedAt != 0 {
		us.FinalizedAt = time.Unix(0, ci.FinalizedAt)
	}
	var liveRecs []ledger.NodeRecord
	for _, rec := range st.Nodes() {
		lo, hi := rec.SpeakRange()
		us.Nodes = append(us.Nodes, NodeVersions{ID: rec.ID, Min: lo, Max: hi, Live: live[rec.ID]})
		if live[rec.ID] {
			liveRecs = append(liveRecs, rec)
		}
	}
	us.Target, us.Blockers = ledger.VersionTarget(liveRecs)
	if us.Blockers == nil {
		us.Blockers = []string{} // JSON: [], not null
	}
	blocking := map[string]bool{}
	for _, id := range us.Blockers {
		blocking[id] = true
	}
	for i := range us.Nodes {
		us.Nodes[i].Blocking = blocking[us.Nodes[i].ID]
	}
	return us
}

// ErrNothingToFinalize: FinalizeUpgrade found the cluster already at the
// newest version every live node speaks.
var ErrNothingToFinalize = errors.New("node: nothing to finalize")

// FinalizeUpgrade raises the cluster's active version to the newest one
// every live node speaks (UpgradeStatus.Target). It is irreversible: from
// then on a binary that cannot run at the new version is refused, so no
// node can go back to the previous release. It returns the status after
// the commit; ErrNothingToFinalize when Active is already Target.
func (n *Node) FinalizeUpgrade(ctx context.Context) (UpgradeStatus, error) {
	ub, err := n.replica("cluster versions")
	if err != nil {
		return UpgradeStatus{}, err
	}
	st := ub.ledgerState()
	us := n.upgradeStatus(st)
	if us.Target <= us.Active {
		return us, fmt.Errorf("%w: the cluster runs version %d, and %d is the newest every live node speaks (held back by %v)",
			ErrNothingToFinalize, us.Active, us.Target, us.Blockers)
	}
	ci := st.Cluster()
	if ci.Name == "" {
		return us, fmt.Errorf("%w: the cluster has not recorded its configuration yet: retry in a moment", ErrNoQuorum)
	}
	r, err := ub.commitCommand(ctx, ledger.ClusterConfig{Name: ci.Name, Partitions: ci.Partitions, Version: us.Target, Now: time.Now().UnixNano()})
	if err == nil {
		err = mapLedgerErr(r.Err)
	}
	if err != nil {
		return us, err
	}
	return n.upgradeStatus(ub.ledgerState()), nil
}

// StateDigest returns a hash of this node's whole replicated state right
// after it applied log index (ledger.FSM.RequestDigest): nodes that applied
// the same log agree. index must be ahead of what the node has applied when
// it is first asked for; the call then waits (within ctx) until it is
// applied. ErrUnsupported on the in-memory network.
func (n *Node) StateDigest(ctx context.Context, index uint64) (uint64, error) {
	nb, ok := n.be.(*netBackend)
	if !ok {
		return 0, fmt.Errorf("%w: state digests on an in-memory network", ErrUnsupported)
	}
	if err := nb.fsm.RequestDigest(index); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nb.fsm.Digest(ctx, index)
}
