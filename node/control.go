package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

func clusterIdentity(dataDir, defaultID string) (string, uint64, error) {
	id, err := cluster.LoadIdentity(dataDir, defaultID)
	if err != nil {
		return "", 0, fmt.Errorf("node: identity: %w", err)
	}
	return id.ID, id.Incarnation, nil
}

// controlTuning overrides control-group settings in tests.
type controlTuning struct {
	snapshotThreshold uint64
	snapshotInterval  time.Duration
	// lanRaft uses the LAN Raft timeouts whatever the profile: fewer
	// spurious elections on a loaded test machine.
	lanRaft bool
	// uncheckedCommands lets the leader propose bytes that do not decode
	// (no CheckCommand): tests put an unreadable entry in a real log.
	uncheckedCommands bool
}

// tuneControl lets tests shrink snapshot thresholds.
var tuneControl = func(*controlTuning) {}

// snapshots returns how many Raft snapshots the node keeps.
func (b *netBackend) snapshots() int {
	l, err := b.store.Snapshots.List()
	if err != nil {
		return 0
	}
	return len(l)
}

// clusterControl adapts cluster.ControlGroup to controlPlane.
type clusterControl struct {
	g    *cluster.ControlGroup
	lead chan bool
	done chan struct{}
}

func newClusterControl(d controlDeps) (controlPlane, error) {
	row, _ := d.cfg.Profile.row()
	cc := row.control()
	cc.NodeID, cc.Incarnation = d.id, d.incarnation
	cc.BindAddr, cc.AdvertiseAddr = d.cfg.RaftAddr, d.cfg.RaftAdvertise
	cc.BootstrapExpect = d.cfg.BootstrapExpect
	cc.BootstrapGate = d.joined
	cc.Voter = d.cfg.Voter
	cc.StreamStandbys = d.cfg.Standbys
	if cc.MaxVoters < cc.BootstrapExpect {
		cc.MaxVoters = cc.BootstrapExpect | 1
	}
	cc.FSM = d.fsm
	cc.MaxInstallSnapshot = ledger.MaxSnapshotSize
	cc.CheckCommand = func(cmd []byte) error {
		c, err := ledger.Decode(cmd)
		if err != nil {
			return err
		}
		return checkClaim(d.fsm.State(), c)
	}
	cc.LogStore, cc.StableStore, cc.SnapshotStore = d.store.Log, d.store.Stable, d.store.Snapshots
	// The committed-state stream (cluster version 5): members follow it
	// instead of Raft once the version is active; voters serve it.
	cc.AppliedIndex = func() uint64 { return d.fsm.State().AppliedIndex() }
	cc.StreamActive = func() bool { return d.fsm.State().VersionActive(ledger.VersionStreamMembers) }
	cc.StreamPending = func() bool { return d.fsm.State().Cluster().Name == "" }
	if d.renew != nil {
		cc.Renew = func(now time.Time, req cluster.RenewRequest) ([]byte, error) {
			rec, err := d.renew(now, req)
			if errors.Is(err, ownership.ErrNotLeader) {
				// The term is not established yet: hold the renewal
				// for it (RenewReady) rather than refuse it.
				err = fmt.Errorf("%w: %w", cluster.ErrRenewNotReady, err)
			}
			data, merr := json.Marshal(rec)
			if merr != nil {
				return nil, errors.Join(err, merr)
			}
			return data, err
		}
		cc.RenewRefusals = renewRefusals
		cc.RenewReady = d.renewReady
	}
	if d.words != nil {
		cc.Words, cc.NoWords = d.words, noWords
	}
	if d.ownerWord != nil {
		cc.OwnerWord = d.ownerWord
	}
	var tune controlTuning
	tuneControl(&tune)
	if tune.snapshotThreshold > 0 {
		cc.SnapshotThreshold, cc.TrailingLogs = tune.snapshotThreshold, tune.snapshotThreshold
	}
	if tune.snapshotInterval > 0 {
		cc.SnapshotInterval = tune.snapshotInterval
	}
	if tune.uncheckedCommands {
		cc.CheckCommand = nil
	}
	if tune.lanRaft {
		lan := profileTable[ProfileDefault].control()
		cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = lan.HeartbeatTimeout, lan.ElectionTimeout, lan.LeaderLeaseTimeout
	}
	if d.cfg.Logger != nil {
		cc.Logger = d.cfg.Logger.With("component", "control")
	}
	d.cfg.Network.attachRaft(&cc, d.cfg)
	if err := controlSecurity(&cc, d.cfg, d.fsm, cc.Logger); err != nil {
		return nil, err
	}
	// An empty Batch: every release decodes it (minimum encoding version)
	// and applies it as a no-op that advances the replica's applied index.
	push, err := ledger.Encode(ledger.Batch{})
	if err != nil {
		return nil, fmt.Errorf("node: encode the commit push: %w", err)
	}
	cc.PushCommand = push
	// The hook is registered before the group starts applying; it reaches
	// the group through an atomic pointer set once the group exists.
	// One push per entry: the commands of a Batch entry (a drain's
	// handoffs, a planner round's grants) share its index, and a push
	// appended after the entry applied carries its commit. The hook runs on
	// the FSM's one apply goroutine, so pushedAt needs no lock.
	var pushTo atomic.Pointer[cluster.ControlGroup]
	var pushedAt uint64
	d.fsm.OnApply(func(index uint64, c ledger.Command, r ledger.Result) {
		if g := pushTo.Load(); g != nil && index != pushedAt && handsOver(c, r) {
			pushedAt = index
			g.PushCommit()
		}
	})
	g, err := cluster.NewControlGroup(cc, cluster.AdaptPeers[*cluster.Subscription](d.members))
	if err != nil {
		return nil, fmt.Errorf("node: control group: %w", err)
	}
	pushTo.Store(g)
	c := &clusterControl{g: g, lead: make(chan bool), done: make(chan struct{})}
	go func() {
		defer close(c.lead)
		for ev := range g.Leadership() {
			select {
			case c.lead <- ev.Leader:
			case <-c.done:
				return
			}
		}
	}()
	return c, nil
}

func (c *clusterControl) Apply(ctx context.Context, cmd []byte) (ledger.Result, error) {
	return c.result(c.g.Apply(ctx, cmd))
}

// result maps a control-group apply's outcome to the ledger's Result and
// the node's errors.
func (c *clusterControl) result(a cluster.Applied, err error) (ledger.Result, error) {
	switch {
	case err == nil:
	case errors.Is(err, cluster.ErrLeadershipLost), errors.Is(err, cluster.ErrTimeout):
		return ledger.Result{}, fmt.Errorf("%w: %w", ownership.ErrLeadershipLost, err)
	case errors.Is(err, cluster.ErrNotLeader):
		return ledger.Result{}, fmt.Errorf("%w: %w", ownership.ErrNotLeader, err)
	case errors.Is(err, cluster.ErrUnauthorized):
		return ledger.Result{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	default:
		return ledger.Result{}, err
	}
	var r ledger.Result
	if err := r.UnmarshalBinary(a.Response); err != nil {
		return ledger.Result{}, fmt.Errorf("node: decode ledger result at index %d: %w", a.Index, err)
	}
	if r.Index == 0 {
		r.Index = a.Index
	}
	return r, nil
}

func (c *clusterControl) Barrier(ctx context.Context) error {
	if err := c.g.Barrier(ctx); err != nil {
		if errors.Is(err, cluster.ErrNotLeader) {
			return fmt.Errorf("%w: %w", ownership.ErrNotLeader, err)
		}
		return err
	}
	return nil
}

// renewRefusals are the planner's refusals of a renewal that cross the wire
// by name (cluster.ControlConfig.RenewRefusals): every node uses this table.
var renewRefusals = map[string]error{
	"stale-liveness":    ledger.ErrStaleLiveness,
	"stale-incarnation": ledger.ErrStaleIncarnation,
	"expiring":          ownership.ErrExpiring,
	"not-leader":        ownership.ErrNotLeader,
	"revoked":           ledger.ErrRevoked,
}

func (c *clusterControl) Renew(ctx context.Context, node string, inc, liveness uint64) (uint64, ledger.NodeRecord, error) {
	res, err := c.g.Renew(ctx, cluster.RenewRequest{Node: node, Incarnation: inc, Liveness: liveness})
	var rec ledger.NodeRecord
	if len(res.Record) > 0 {
		if derr := json.Unmarshal(res.Record, &rec); derr != nil {
			return 0, ledger.NodeRecord{}, fmt.Errorf("node: decode the leader's node record: %w", derr)
		}
	}
	return res.CommitIndex, rec, err
}

func (c *clusterControl) Words(ctx context.Context, node string) ([]byte, error) {
	return c.g.Words(ctx, node)
}

func (c *clusterControl) SendOwnerWord(ctx context.Context, cmd []byte) error {
	return c.g.SendOwnerWord(ctx, cmd)
}

func (c *clusterControl) ReadIndex(ctx context.Context) (uint64, error) {
	return c.g.ReadIndex(ctx)
}

func (c *clusterControl) EstablishBound(ctx context.Context, now time.Time) time.Time {
	return c.g.EstablishBound(ctx, now)
}

func (c *clusterControl) Leadership() <-chan bool { return c.lead }

func (c *clusterControl) Leader() string {
	id, _ := c.g.Leader()
	return id
}

func (c *clusterControl) Voters() []string {
	v := slices.Clone(c.g.Voters())
	slices.Sort(v)
	return v
}

func (c *clusterControl) Addr() string { return c.g.Addr() }

// StreamStatus reports the node's part in the committed-state stream.
func (c *clusterControl) StreamStatus() cluster.StreamStatus { return c.g.StreamStatus() }

// Unproven lists the gossiped members that have not proven their id at
// their Raft address ("id@addr"; the leader's view, cluster/proof.go).
func (c *clusterControl) Unproven() []string { return c.g.Unproven() }

func (c *clusterControl) Shutdown(ctx context.Context) error {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return c.g.Shutdown(ctx)
}

// handsOver reports whether an applied command moves a shard on — a Grant
// or a Transfer from a draining owner, whose new owner waits to apply it
// before it acts, or a Revoke, whose owner waits to apply it before it
// stops and hands the shard over. On the leader the control group then
// pushes the commit index to the followers at once
// (cluster.ControlGroup.PushCommit) instead of letting them learn it at
// Raft's next commit tick, up to 2·CommitTimeout later (docs/handoff.md).
// A Release needs no push: the Grant the leader's planner proposes after it
// is one of these.
func handsOver(c ledger.Command, r ledger.Result) bool {
	if r.Err != nil {
		return false
	}
	switch c.(type) {
	case ledger.Grant, ledger.Transfer, ledger.Revoke:
		return true
	}
	return false
}
