package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/cluster/commit"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ledger/raftstore"
	"github.com/tenurehq/tenure/ownership"
)

// controlPlane is what the real backend needs from the Raft control group
// (cluster.ControlGroup): commit commands (forwarded to the leader), a
// Barrier for the ownership leader loop, and leadership events.
type controlPlane interface {
	// Apply (a commit.Applier: the Batcher commits through it) commits an
	// encoded ledger command and returns the ledger's
	// Result. Errors wrap ErrNoQuorum when nothing could be committed, or
	// ownership.ErrLeadershipLost when the outcome is unknown.
	Apply(ctx context.Context, cmd []byte) (ledger.Result, error)
	// Barrier waits until the local FSM applied everything committed
	// before the call; leader only.
	Barrier(ctx context.Context) error
	// Leadership reports established leadership (true, after a Barrier)
	// and its loss (false). It is closed on Shutdown.
	Leadership() <-chan bool
	// Leader returns the leader's node id, "" if unknown.
	Leader() string
	// Voters returns the voters' node ids, sorted.
	Voters() []string
	// Addr is the address peers reach the control group at.
	Addr() string
	// Renew renews this node's lease with the leader (cluster version 4,
	// docs/protocol.md "Renewals off the log"): nil when a leader accepted
	// it and then confirmed its leadership with a quorum round; commit is
	// the leader's last log index read after receipt. A refusal as stale
	// (ledger.ErrStaleLiveness, ledger.ErrStaleIncarnation) carries the
	// leader's record of the node.
	Renew(ctx context.Context, node string, inc, liveness uint64) (commit uint64, rec ledger.NodeRecord, err error)
	// ReadIndex is a read barrier (cluster version 5,
	// cluster.ControlGroup.ReadIndex): the leader's last log index, read
	// after it received the request and confirmed by a quorum round.
	ReadIndex(ctx context.Context) (uint64, error)
	// EstablishBound is the new leader's bound from the voters' confirm
	// records (cluster.ControlGroup.EstablishBound): now when unsure.
	EstablishBound(ctx context.Context, now time.Time) time.Time
	// Shutdown stops the control group.
	Shutdown(ctx context.Context) error
}

// controlDeps is what building a control plane takes.
type controlDeps struct {
	cfg         Config
	id          string
	incarnation uint64
	fsm         *ledger.FSM
	store       *raftstore.Store
	members     *cluster.Membership
	timing      Timing
	// renew judges a renewal this node received as leader
	// (netBackend.serveRenew): the record is the node's in this replica.
	renew func(now time.Time, req cluster.RenewRequest) (ledger.NodeRecord, error)
	// joined is closed once the node's first join of its seeds has ended
	// (cluster.ControlConfig.BootstrapGate).
	joined <-chan struct{}
}

// newControlPlane builds the control group (control.go); a variable so
// tests can substitute a single-voter one.
var newControlPlane = newClusterControl

// loadIdentity reads the node id and bumps the incarnation in dataDir
// (cluster.LoadIdentity); a variable for tests.
var loadIdentity = clusterIdentity

// healthTagPrefix marks health metadata inside the gossiped tags.
const healthTagPrefix = "health."

// groupTag carries the node's group in the gossiped tags. cluster.Meta's
// Group is the gossip boundary (nodes of another Meta.Group are refused),
// so it holds Config.Cluster, and the node's group travels here.
const groupTag = "tenure.group"

// partitionsTag carries Config.Partitions in the gossiped tags: every node
// of a cluster must hash keys onto the same shards, so gossip refuses a
// peer that gossips another count (cluster.Config.CheckPeer).
const partitionsTag = "tenure.partitions"

// weightTag and zoneTag carry Config.Weight and Config.Zone in the
// gossiped tags (ownership.Member.Weight and Zone); absent means weight 1
// and no zone.
const (
	weightTag = "tenure.weight"
	zoneTag   = "tenure.zone"
)

// gossipedWeight reads a member's weight tag: 0 (weight 1) when absent or
// not a number in 1..MaxWeight (a peer's tags are outside input).
func gossipedWeight(tags map[string]string) int {
	w, err := strconv.Atoi(tags[weightTag])
	if err != nil || w < 1 || w > MaxWeight {
		return 0
	}
	return w
}

// voterShardsTag, set to "no", carries Config.VoterOwnsNoShards in the
// gossiped tags: the leader's planner gives such a node no shards while
// it is a voter (ownership.Member.NoShards). The voter preference travels
// in cluster.TagVoter.
const voterShardsTag = "tenure.voter-shards"

// ownsNoShards reports whether a member with these tags asks to own no
// shards, given whether it is a control-group voter now.
func ownsNoShards(tags map[string]string, voter bool) bool {
	return voter && tags[voterShardsTag] == "no"
}

// keyringFileName is the gossip keyring kept in DataDir (cluster.Config
// KeyringFile).
const keyringFileName = "gossip.keyring"

// keyringFileExists reports whether dataDir holds a gossip keyring.
func keyringFileExists(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, keyringFileName))
	return err == nil
}

// checkPartitions is the gossip CheckPeer of a node with partitions
// shards: a peer gossiping another count is refused. Peers that gossip
// none (an older release) are admitted.
func checkPartitions(partitions int) func(cluster.Meta) error {
	want := strconv.Itoa(partitions)
	return func(m cluster.Meta) error {
		if got, ok := m.Tags[partitionsTag]; ok && got != want {
			return fmt.Errorf("it has %s partitions, this node %s: every node of a cluster needs the same Partitions", got, want)
		}
		return nil
	}
}

// netBackend runs a node over real gossip, Raft and storage.
type netBackend struct {
	cfg    Config
	timing Timing
	ocfg   ownership.Config
	id     string
	inc    uint64
	notify func()

	store   *raftstore.Store
	fsm     *ledger.FSM
	gossip  *cluster.Membership
	ctl     controlPlane
	batcher *commit.Batcher
	loop    *ownership.LeaderLoop
	// loopReady is loop once it exists: renewals can reach the control
	// group before realBackend built the loop.
	loopReady atomic.Pointer[ownership.LeaderLoop]
	// v4At is the local time this process first saw cluster version 4
	// active in its replica (zero: not yet); the leader's bound is never
	// earlier (design step 9, ownership.EstablishBound).
	v4At atomic.Pointer[time.Time]
	// renewSeen is, on the leader, when it last accepted each node's
	// renewal (what the planner calls lastSeen): the members view under
	// cluster version 4. Guarded by renewMu.
	renewMu   sync.Mutex
	renewSeen map[string]time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kickCh chan struct{} // applied entries to observe; capacity 1

	// mu guards the agent and the fields below. The agent
	// (ownership.Agent) makes every node-side decision; this backend only
	// feeds it inputs and carries out its Ready (agentLoop, step).
	mu    sync.Mutex
	agent *ownership.Agent
	// work is the acting set as the agent's Ready.Changes reported it
	// (acting.go): what workers start and stop from.
	work map[uint32]ownership.Change
	// agentSaw is the replica state the agent last observed in full
	// (stepLatest): the same state again is only a Tick.
	agentSaw   *ledger.State
	registered bool
	closed     bool
	conflict   error // ErrIdentityConflict, found by a rejected first heartbeat

	versionMu   sync.Mutex
	versionSeen uint32 // the cluster version recorded in DataDir

	// dropHeartbeats is a fault injection for tests: heartbeats fail as if
	// this node were partitioned from the control group.
	dropHeartbeats atomic.Bool
}

var _ backend = (*netBackend)(nil)

// ownershipConfig maps a node profile to the ownership configuration.
func ownershipConfig(cfg Config) ownership.Config {
	row, _ := cfg.Profile.row() // Validate refused unknown profiles
	oc := row.ownership()
	oc.Ring.Partitions = cfg.Partitions
	oc.MinHealth = cfg.MinHealth
	oc.ClusterName = cfg.Cluster
	oc.ManualFinalize = cfg.ManualFinalize
	oc.MaxVersion = cfg.speakMax
	oc.FencedAfter = cfg.FencedAfter
	// Non-zero values replace the profile's (ownership.Config.Validate
	// judges them); a negative LoadThreshold turns load balancing off.
	switch {
	case cfg.LoadThreshold < 0:
		oc.Load.Threshold = 0
	case cfg.LoadThreshold != 0:
		oc.Load.Threshold = cfg.LoadThreshold
	}
	if cfg.LoadSwapsPerMinute != 0 {
		oc.Load.SwapsPerMinute = cfg.LoadSwapsPerMinute
	}
	if cfg.LoadSettle != 0 {
		oc.Load.Settle = cfg.LoadSettle
	}
	tuneOwnership(&oc)
	return oc
}

// tuneOwnership overrides ownership settings in tests.
var tuneOwnership = func(*ownership.Config) {}

// membershipConfig maps a node profile to the gossip configuration.
func membershipConfig(cfg Config) (cluster.Config, error) {
	row, _ := cfg.Profile.row()
	mc := row.membership()
	mc.Name = cfg.NodeID
	mc.ClusterLabel = cfg.Cluster
	host, port, err := splitHostPort(cfg.GossipAddr)
	if err != nil {
		return mc, fmt.Errorf("GossipAddr: %w", err)
	}
	mc.BindAddr, mc.BindPort = host, port
	if cfg.GossipAdvertise != "" {
		host, port, err := splitHostPort(cfg.GossipAdvertise)
		if err != nil {
			return mc, fmt.Errorf("GossipAdvertise: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	mc.Seeds = slices.Clone(cfg.Seeds)
	if len(cfg.EncryptionKey) > 0 {
		mc.SecretKeys = [][]byte{slices.Clone(cfg.EncryptionKey)}
	}
	if cfg.DataDir != "" && cfg.Network == nil {
		mc.KeyringFile = filepath.Join(cfg.DataDir, keyringFileName)
	}
	mc.CheckPeer = checkPartitions(cfg.Partitions)
	if cfg.Logger != nil {
		mc.Logger = cfg.Logger.With("component", "gossip")
	}
	return mc, nil
}

func realBackend(ctx context.Context, cfg Config, notify func()) (_ backend, err error) {
	ocfg := ownershipConfig(cfg)
	b := &netBackend{
		cfg: cfg, timing: timingOf(ocfg), ocfg: ocfg, notify: notify,
		kickCh: make(chan struct{}, 1),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	var cleanup []func()
	defer func() {
		if err != nil {
			b.cancel()
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	// The store's file lock makes this process the only one using the
	// data dir, which the incarnation counter relies on.
	b.store, err = b.openStore()
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { _ = b.closeStore() })
	b.id, b.inc, err = b.loadIdentity()
	if err != nil {
		return nil, err
	}
	if b.id != cfg.NodeID {
		return nil, fmt.Errorf("node: data dir %s belongs to node %q, not %q", cfg.DataDir, b.id, cfg.NodeID)
	}
	if dir := b.versionDir(); dir != "" {
		if b.versionSeen, err = checkVersionFile(dir, cfg.speakMax); err != nil {
			return nil, err
		}
	}

	b.fsm, err = ledger.NewFSM(ledger.DefaultConfig())
	if err != nil {
		return nil, err
	}
	for _, typ := range sortedKeys(cfg.StateMachines) {
		if err := b.fsm.RegisterStateMachine(typ, cfg.StateMachines[typ]); err != nil {
			return nil, fmt.Errorf("node: register state machine %q: %w", typ, err)
		}
	}
	b.fsm.OnApply(func(uint64, ledger.Command, ledger.Result) { b.kick() })
	b.fsm.OnHalt(func(h ledger.Halt) {
		if cfg.Logger != nil {
			cfg.Logger.Error("node: the ledger replica stopped applying: this binary cannot read a committed entry; "+
				"the node stops acting until it runs a binary that can", "index", h.Index, "entry_version", h.Version, "err", h.Err)
		}
		b.kick()
	})

	mc, err := membershipConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.Network.attachGossip(&mc, cfg, &cleanup); err != nil {
		return nil, err
	}
	meta := cluster.Meta{
		ID: b.id, Group: cfg.Cluster, Incarnation: b.inc, Health: 1,
		RaftAddr: firstNonEmpty(cfg.RaftAdvertise, cfg.RaftAddr), HTTPAddr: cfg.HTTPAddr,
		Version: "tenure", Tags: maps.Clone(cfg.Tags),
	}
	if meta.Tags == nil {
		meta.Tags = make(map[string]string)
	}
	meta.Tags[groupTag] = cfg.Group
	meta.Tags[partitionsTag] = strconv.Itoa(cfg.Partitions)
	if cfg.Voter != "" && cfg.Voter != VoterAuto {
		meta.Tags[cluster.TagVoter] = string(cfg.Voter)
	}
	// This binary follows the committed-state stream when out of Raft
	// (cluster version 5): the leader may keep it out.
	meta.Tags[cluster.TagStream] = "1"
	if cfg.VoterOwnsNoShards {
		meta.Tags[voterShardsTag] = "no"
	}
	if cfg.Weight > 1 {
		meta.Tags[weightTag] = strconv.Itoa(cfg.Weight)
	}
	if cfg.Zone != "" {
		meta.Tags[zoneTag] = cfg.Zone
	}
	// Until ClaimID finds no other live process with this id, peers never
	// take this instance for the node (cluster.TagClaiming).
	meta.Tags[cluster.TagClaiming] = "1"
	b.gossip, err = cluster.NewMembership(mc, meta)
	if err != nil {
		return nil, fmt.Errorf("node: gossip: %w", err)
	}
	cleanup = append(cleanup, func() { _ = b.gossip.Shutdown() })

	// The control group starts before the join (gossip must carry its
	// Raft address), but bootstraps only after it: a node that has not
	// heard from its seeds would take itself for the whole cluster.
	joined := make(chan struct{})
	b.ctl, err = newControlPlane(controlDeps{cfg: cfg, id: b.id, incarnation: b.inc, fsm: b.fsm, store: b.store, members: b.gossip, timing: b.timing, joined: joined,
		renew: b.serveRenew})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { _ = b.ctl.Shutdown(context.Background()) })
	if addr := b.ctl.Addr(); addr != "" && addr != meta.RaftAddr {
		if err := b.gossip.UpdateMeta(func(m *cluster.Meta) { m.RaftAddr = addr }); err != nil {
			return nil, fmt.Errorf("node: gossip raft address: %w", err)
		}
	}
	if len(cfg.Seeds) > 0 {
		if _, err := b.gossip.Join(ctx, nil); errors.Is(err, cluster.ErrForeignCluster) {
			return nil, fmt.Errorf("%w: %w", ErrClusterMismatch, err)
		} else if err != nil {
			// Not fatal: seeds may start later; gossip re-joins them.
			if cfg.Logger != nil {
				cfg.Logger.Warn("node: join seeds", "err", err)
			}
		}
	}
	close(joined)
	// Before the first heartbeat: a second process with a live node's id
	// must exit without registering (docs/operations.md).
	if err := b.gossip.ClaimID(ctx); errors.Is(err, cluster.ErrIDInUse) {
		_ = b.gossip.Leave(context.Background())
		return nil, fmt.Errorf("%w: %w", ErrDuplicateID, err)
	} else if err != nil {
		return nil, fmt.Errorf("node: claim node id: %w", err)
	}

	if cfg.diskless() {
		// After ClaimID: a duplicate must be refused before it claims an
		// incarnation, which would fence the live process it duplicates.
		cl, ok := b.ctl.(incarnationClaimer)
		if !ok {
			return nil, fmt.Errorf("node: disk-less member: the control plane cannot claim an incarnation")
		}
		var index uint64
		if b.inc, index, err = b.claimIncarnation(ctx, cl); err != nil {
			_ = b.gossip.Leave(context.Background())
			return nil, err
		}
		cl.SetIncarnation(b.inc)
		// Gossip the new incarnation (the control group adds the node as a
		// non-voter only once gossip shows an incarnation above any that
		// left) with health 0 until the replica has caught up to the
		// claim: the planner grants an unhealthy node nothing, so the
		// member is not given shards it could not act on yet. The claim's
		// own lease may lapse meanwhile; the first heartbeat then rejoins
		// at the new liveness.
		// Queued, not awaited (here and at health 1 below): waiting for
		// each broadcast cost a restarted member up to 2·GossipInterval
		// before it could act (TestMemberFailoverAndRestart), and nothing
		// it does next needs peers to have seen it.
		if err := b.gossip.QueueMeta(func(m *cluster.Meta) { m.Incarnation, m.Health = b.inc, 0 }); err != nil {
			return nil, fmt.Errorf("node: gossip incarnation: %w", err)
		}
		if err := b.fsm.WaitApplied(ctx, index); err != nil {
			_ = b.gossip.Leave(context.Background())
			return nil, fmt.Errorf("node: disk-less member %q: rebuild the ledger replica up to its claim (index %d): %w", b.id, index, err)
		}
		if err := b.gossip.QueueMeta(func(m *cluster.Meta) { m.Health = 1 }); err != nil {
			return nil, fmt.Errorf("node: gossip health: %w", err)
		}
		if cfg.Logger != nil {
			cfg.Logger.Info("node: disk-less member registered", "node", b.id, "incarnation", b.inc)
		}
	}
	// After the claim: a disk-less member's incarnation is the claimed one.
	cfg.Network.hook(b.fsm, b.id, b.inc)
	b.agent, err = ownership.NewAgent(b.ocfg, b.id, b.inc)
	if err != nil {
		return nil, err
	}

	b.batcher, err = commit.NewBatcher(b.ctl, commit.BatcherConfig{})
	if err != nil {
		return nil, err
	}
	planner, err := ownership.NewPlanner(b.ocfg)
	if err != nil {
		return nil, err
	}
	b.loop = ownership.NewLeaderLoop(planner, loopProposer{b}, loopSource{b}, ownership.LoopConfig{Logger: cfg.Logger,
		ConfirmBound: b.ctl.EstablishBound, RenewalsSince: b.renewalsSince})
	b.loopReady.Store(b.loop)

	b.goLoop(b.agentLoop)
	b.goLoop(b.membershipLoop)
	b.goLoop(func() { _ = b.loop.Run(b.ctx, b.ctl.Leadership()) })
	return b, nil
}

func (b *netBackend) goLoop(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

func (b *netBackend) kick() {
	select {
	case b.kickCh <- struct{}{}:
	default:
	}
}

// identityConflict explains a first heartbeat rejected because the control
// group knows this id at incarnation registered, above ours: a newer
// process of this id, which this one can never be — the data dir was wiped
// or replaced (the counter started again) or another process uses the id;
// for a disk-less member, another process claimed the id after this one.
func identityConflict(cfg Config, id string, inc, registered uint64) error {
	if cfg.diskless() {
		return fmt.Errorf("%w: the control group has disk-less member %q registered at incarnation %d, above this process's %d: "+
			"another process claimed the id after this one (two processes run as %q; only the newest may act)",
			ErrIdentityConflict, id, registered, inc, id)
	}
	where := "its data dir " + cfg.DataDir
	if cfg.Network != nil {
		where = "its storage"
	}
	return fmt.Errorf("%w: the control group has node %q registered at incarnation %d, but this process is incarnation %d: "+
		"%s was wiped or replaced while the id is still a member (or another process runs as %q). "+
		"A node that lost its data dir lost its Raft term and vote and must not rejoin under its old id, "+
		"and the ledger keeps the id's incarnation: restore the data dir from a backup, or start this node under a new node id; "+
		"the control group replaces the old member %q once it has not been seen alive for its dead-voter timeout "+
		"(docs/operations.md, \"Damaged storage\")",
		ErrIdentityConflict, id, registered, inc, where, id, id)
}

// agentLoop steps the agent when the replica applied entries (kick) and
// at the local time its last Ready asked for, and wakes the node and the
// leader loop.
func (b *netBackend) agentLoop() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.kickCh:
		case <-timer.C:
		}
		wake := b.stepLatest(time.Now())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		wait := b.timing.RenewEvery
		if !wake.IsZero() {
			wait = min(wait, max(time.Until(wake), 0))
		}
		timer.Reset(wait)
		b.loop.Notify()
		b.notify()
	}
}

// stepLatest steps the agent with the replica's latest applied state:
// every node and shard record up to its applied index — or, when the
// agent already observed that very state (states are immutable: the same
// records at the same index), only a Tick, so a node at rest does not
// copy and re-read every record on each timer and renewal. The state is
// read under b.mu, so the agent never observes an older state after a
// newer one.
func (b *netBackend) stepLatest(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return time.Time{}
	}
	var in ownership.AgentInput = ownership.Tick{}
	if st := b.fsm.State(); st != b.agentSaw {
		v := st.ActiveVersion()
		b.sawVersion(v)
		in = ownership.Observed{Applied: st.AppliedIndex(), Nodes: st.Nodes(), Shards: st.Shards(), Version: v}
		b.agentSaw = st
	}
	rd, _ := b.stepLocked(now, in, nil)
	return rd.WakeAt
}

// step feeds one input to the agent and carries out its Ready; it returns
// the local time the agent asks to be stepped again. b.mu not held.
func (b *netBackend) step(now time.Time, in ownership.AgentInput) time.Time {
	rd, _, _ := b.stepHold(now, in, nil)
	return rd.WakeAt
}

// stepAll feeds inputs to the agent one after another and carries out
// their Readys with the proposals of all of them together, in order: one
// batch (docs/handoff.md). b.mu not held.
func (b *netBackend) stepAll(now time.Time, ins []ownership.AgentInput) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	var cmds []ledger.Command
	for _, in := range ins {
		rd := b.agent.Step(now, in)
		cmds = append(cmds, rd.Proposals...)
		rd.Proposals = nil
		b.dispatch(rd)
	}
	b.dispatch(ownership.Ready{Proposals: cmds})
}

// stepHold is step, except that the first proposal hold selects is
// returned instead of dispatched (the caller commits it itself). ok is
// false once the backend is closed.
func (b *netBackend) stepHold(now time.Time, in ownership.AgentInput, hold func(ledger.Command) bool) (rd ownership.Ready, held ledger.Command, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ownership.Ready{}, nil, false
	}
	rd, held = b.stepLocked(now, in, hold)
	return rd, held, true
}

// stepLocked is stepHold with b.mu held and the backend open.
func (b *netBackend) stepLocked(now time.Time, in ownership.AgentInput, hold func(ledger.Command) bool) (rd ownership.Ready, held ledger.Command) {
	rd = b.agent.Step(now, in)
	switch in := in.(type) {
	case ownership.HeartbeatOutcome:
		b.judgeHeartbeat(in, rd)
	case ownership.RenewOutcome:
		if b.cfg.Logger != nil && rd.Verdict != ownership.VerdictAccepted {
			b.cfg.Logger.Debug("node: renewal not accepted", "err", in.Err)
		}
	}
	if hold != nil {
		for i, c := range rd.Proposals {
			if hold(c) {
				held = c
				rd.Proposals = slices.Delete(slices.Clone(rd.Proposals), i, i+1)
				break
			}
		}
	}
	// Dispatched under b.mu: no goroutine is added once stop has set
	// closed and waits for them.
	b.dispatch(rd)
	return rd, held
}

// dispatch carries out a Ready: the acting changes update the work view
// workers start and stop from (acting.go); the heartbeat and the
// proposals run on their own goroutines (a slow commit must not delay the
// next ask). b.mu held.
func (b *netBackend) dispatch(rd ownership.Ready) {
	b.applyChanges(rd.Changes)
	if rd.Heartbeat != nil {
		ask := *rd.Heartbeat
		b.goLoop(func() { b.heartbeat(ask) })
	}
	if rd.Renew != nil {
		ask := *rd.Renew
		b.goLoop(func() { b.renew(ask) })
	}
	if len(rd.Proposals) > 0 {
		cmds := rd.Proposals
		b.goLoop(func() { b.proposeAll(cmds) })
	}
}

// judgeHeartbeat turns a heartbeat's verdict into the node's start-up
// errors; b.mu held.
func (b *netBackend) judgeHeartbeat(in ownership.HeartbeatOutcome, rd ownership.Ready) {
	if b.cfg.Logger != nil && rd.Verdict != ownership.VerdictAccepted {
		b.cfg.Logger.Debug("node: heartbeat not accepted", "err", in.Err, "rejected", in.Result.Err)
	}
	switch rd.Verdict {
	case ownership.VerdictFenced:
		if !b.registered && rd.Record.ID == b.id && rd.Record.Incarnation > b.inc && b.conflict == nil {
			b.conflict = identityConflict(b.cfg, b.id, b.inc, rd.Record.Incarnation)
		}
	case ownership.VerdictVersion:
		// This binary cannot run at the cluster's version: it must not act.
		if !b.registered && b.conflict == nil {
			b.conflict = fmt.Errorf("%w: %w (docs/upgrades.md)", ErrVersionMismatch, in.Result.Err)
		}
	}
}

// heartbeat commits one lease renewal the agent asked for and reports its
// outcome (docs/protocol.md, node side, rules 1–3).
func (b *netBackend) heartbeat(ask ownership.HeartbeatAsk) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timing.Lease)
	defer cancel()
	var r ledger.Result
	var err error
	if b.dropHeartbeats.Load() {
		err = errors.New("node: heartbeat dropped (fault injection)")
	} else {
		r, err = b.batcher.Apply(ctx, ask.Command)
	}
	b.step(time.Now(), ownership.HeartbeatOutcome{Token: ask.Token, Index: r.Index, Result: r, Err: err})
	if err == nil && r.Err == nil {
		b.acked(ctx, r.Index)
	}
	b.notify()
}

// acked follows an accepted heartbeat or renewal: the lease extends once
// the replica applied index (rule 2), and the node counts as registered
// once it holds a lease in a cluster it may run in.
func (b *netBackend) acked(ctx context.Context, index uint64) {
	_ = b.fsm.WaitApplied(ctx, index)
	cerr := b.checkCluster()
	b.stepLatest(time.Now())
	b.mu.Lock()
	switch {
	case cerr != nil && !b.registered && b.conflict == nil:
		b.conflict = cerr
	case cerr == nil && !b.agent.Status().LeaseEnd.IsZero():
		b.registered = true
	}
	b.mu.Unlock()
}

// renew sends one lease renewal the agent asked for to the control-group
// leader and reports its outcome (docs/protocol.md, renewals off the log):
// the agent extends the lease once the replica applied the leader's index.
func (b *netBackend) renew(ask ownership.RenewAsk) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timing.Lease)
	defer cancel()
	start := time.Now()
	var commit uint64
	var rec ledger.NodeRecord
	var err error
	if b.dropHeartbeats.Load() {
		err = errors.New("node: renewal dropped (fault injection)")
	} else {
		commit, rec, err = b.ctl.Renew(ctx, ask.Node, ask.Incarnation, ask.Liveness)
	}
	if err == nil {
		gometrics.MeasureSince([]string{"lease", "renew"}, start)
	}
	b.step(time.Now(), ownership.RenewOutcome{Token: ask.Token, CommitIndex: commit, Record: rec, Err: err})
	if err == nil {
		b.acked(ctx, commit)
	}
	b.notify()
}

// proposeAll commits the agent's proposals (handoffs, drain
// reconciliation) together, in order — one entry, usually (Batcher.ApplyAll)
// — and waits until the replica applied them; their effect reaches the
// agent through the replica.
func (b *netBackend) proposeAll(cmds []ledger.Command) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timing.Lease)
	defer cancel()
	res, errs := b.batcher.ApplyAll(ctx, cmds)
	var last uint64
	for i := range cmds {
		if errs[i] == nil && res[i].Err == nil {
			last = max(last, res[i].Index)
		}
	}
	if last > 0 {
		_ = b.fsm.WaitApplied(ctx, last)
	}
	b.kick()
}

// membershipLoop wakes the leader loop and the node on gossip changes.
func (b *netBackend) membershipLoop() {
	sub := b.gossip.Subscribe(16)
	defer sub.Close()
	for {
		select {
		case <-b.ctx.Done():
			return
		case _, ok := <-sub.C():
			if !ok {
				return
			}
			b.loop.Notify()
			b.notify()
		}
	}
}

func (b *netBackend) incarnation() uint64  { return b.inc }
func (b *netBackend) appliedIndex() uint64 { return b.fsm.State().AppliedIndex() }

func shardInfo(st *ledger.State, r ledger.ShardRecord) ShardInfo {
	return ShardInfo{
		Shard: r.Shard, Epoch: r.Epoch, Owner: r.Owner, State: r.State, Target: r.Target,
		Valid: st.OwnershipValid(r), ChangedAt: time.Unix(0, r.ChangedAt), Reason: r.Reason, Fenced: st.Fenced(r.Shard),
	}
}

func (b *netBackend) shard(s uint32) (ShardInfo, bool) {
	st := b.fsm.State()
	r, ok := st.Shard(s)
	if !ok {
		return ShardInfo{}, false
	}
	return shardInfo(st, r), true
}

func (b *netBackend) ownershipGen() uint64 { return b.fsm.State().OwnershipGeneration() }

func (b *netBackend) shards() []ShardInfo {
	st := b.fsm.State()
	recs := st.Shards()
	out := make([]ShardInfo, len(recs))
	for i, r := range recs {
		out[i] = shardInfo(st, r)
	}
	return out
}

func (b *netBackend) acting(s uint32, now time.Time) (actingState, bool) {
	if !b.lockFreshAgent(now) {
		return actingState{}, false
	}
	defer b.mu.Unlock()
	a, ok := b.agent.Acting(now, s)
	if !ok {
		return actingState{}, false
	}
	return actingState{epoch: a.Epoch, until: a.Until, revoking: a.Revoking}, true
}

// lockFreshAgent locks b.mu with the agent up to date, and reports false
// (unlocked) once b is closed. The agent must have seen what the replica
// applied, so a shard moved away is never reported acting at its old
// epoch: feed it the latest state first when the replica is ahead (an
// input, like any other).
func (b *netBackend) lockFreshAgent(now time.Time) bool {
	b.mu.Lock()
	stale := !b.closed && b.agent.Status().Applied < b.fsm.State().AppliedIndex()
	b.mu.Unlock()
	if stale {
		b.stepLatest(now)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	return true
}

func (b *netBackend) resigned(s uint32, epoch uint64) {
	b.step(time.Now(), ownership.ShardResigned{Shard: s, Epoch: epoch})
}

func (b *netBackend) draining() bool {
	if b.gossip.Local().Draining {
		return true
	}
	rec, _ := b.fsm.State().Node(b.id)
	return rec.Draining
}

func (b *netBackend) members() []Member {
	st := b.fsm.State()
	leader := b.ctl.Leader()
	voters := b.ctl.Voters()
	seen := b.lastRenewals(st, leader)
	unproven := map[string]bool{}
	if u, ok := b.ctl.(interface{ Unproven() []string }); ok {
		for _, id := range u.Unproven() {
			unproven[id] = true
		}
	}
	var out []Member
	for _, m := range b.gossip.Members() {
		rec, known := st.Node(m.ID)
		mm := Member{
			ID: m.ID, Group: firstNonEmpty(m.Tags[groupTag], m.Group), Incarnation: m.Incarnation, Addr: m.Addr, RaftAddr: m.RaftAddr,
			HTTPAddr: m.HTTPAddr, State: m.State, Health: m.Health, Draining: m.Draining || rec.Draining,
			Live:  known && rec.Incarnation == m.Incarnation && (m.State == cluster.StateAlive || m.State == cluster.StateSuspect),
			Voter: slices.Contains(voters, m.ID), Leader: m.ID == leader, Version: m.Version,
		}
		mm.NoShards = ownsNoShards(m.Tags, mm.Voter)
		mm.Weight, mm.Zone = max(gossipedWeight(m.Tags), 1), m.Tags[zoneTag]
		mm.Excluded = st.IsExcluded(m.ID)
		mm.Unproven = unproven[m.ID+"@"+m.RaftAddr]
		mm.Load = parseLoad(m.Tags[loadTag])
		switch {
		case seen != nil:
			mm.UpdatedAt = seen[m.ID] // zero: unknown here
		case known && rec.HeartbeatAt != 0:
			mm.UpdatedAt = time.Unix(0, rec.HeartbeatAt)
		}
		for k, v := range m.Tags {
			if strings.HasPrefix(k, "tenure.") { // reserved: groupTag, partitionsTag, TagClaiming, TagVoter...
				continue
			}
			if meta, ok := strings.CutPrefix(k, healthTagPrefix); ok {
				if mm.Metadata == nil {
					mm.Metadata = make(map[string]string)
				}
				mm.Metadata[meta] = v
				continue
			}
			if mm.Tags == nil {
				mm.Tags = make(map[string]string)
			}
			mm.Tags[k] = v
		}
		out = append(out, mm)
	}
	return out
}

// lastRenewals is, under cluster version 4, when each member last renewed
// as far as this node knows: its own last acknowledged renewal, and on the
// leader the renewals it accepted. Followers do not see others' renewals
// (they are not on the log): those stay zero. nil before version 4 (the
// committed heartbeat time is then the truth).
func (b *netBackend) lastRenewals(st *ledger.State, leader string) map[string]time.Time {
	if st.ActiveVersion() < ledger.VersionLeaseRenewals {
		return nil
	}
	out := map[string]time.Time{}
	if leader == b.id {
		b.renewMu.Lock()
		for id, t := range b.renewSeen {
			out[id] = t
		}
		b.renewMu.Unlock()
	}
	b.mu.Lock()
	if !b.closed {
		out[b.id] = b.agent.Status().LastAck
	}
	b.mu.Unlock()
	return out
}

func (b *netBackend) liveNodes() []string {
	var out []string
	for _, m := range b.members() {
		if m.Live {
			out = append(out, m.ID)
		}
	}
	return out
}

func (b *netBackend) control() controlInfo {
	leader := b.ctl.Leader()
	b.mu.Lock()
	lastAck := b.agent.Status().LastAck
	b.mu.Unlock()
	recent := !lastAck.IsZero() && time.Since(lastAck) < b.timing.Lease
	ci := controlInfo{leader: leader, voters: b.ctl.Voters(), quorum: leader != "" && recent, isLeader: leader == b.id}
	ci.stream = streamStatus(b.ctl, b.fsm.State())
	if h, ok := b.fsm.HaltedAt(); ok {
		ci.halted, ci.haltedAt = h.Error(), h.Index
	}
	return ci
}

func (b *netBackend) lease() leaseInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.agent.Status()
	return leaseInfo{registered: b.registered, leaseEnd: st.LeaseEnd, lastAck: st.LastAck, failing: st.Failing,
		fenced: st.Fenced, conflict: b.conflict, wedgedShards: b.agent.Wedged(time.Now())}
}

func (b *netBackend) setLoad(summary string) error {
	return b.gossip.UpdateMeta(func(m *cluster.Meta) {
		if m.Tags == nil {
			m.Tags = make(map[string]string)
		}
		m.Tags[loadTag] = summary
	})
}

func (b *netBackend) setHealth(score float64, meta map[string]string) error {
	return b.gossip.UpdateMeta(func(m *cluster.Meta) {
		m.Health = score
		for k := range m.Tags {
			if strings.HasPrefix(k, healthTagPrefix) {
				delete(m.Tags, k)
			}
		}
		if len(meta) > 0 && m.Tags == nil {
			m.Tags = make(map[string]string)
		}
		for k, v := range meta {
			m.Tags[healthTagPrefix+k] = v
		}
	})
}

// commit applies one command through the batcher, waits until this node's
// replica applied it (read your writes) and maps the ledger's verdict.
func (b *netBackend) commit(ctx context.Context, c ledger.Command) (ledger.Result, error) {
	r, err := b.batcher.Apply(ctx, c)
	if err != nil {
		return r, mapControlErr(err)
	}
	if werr := b.fsm.WaitApplied(ctx, r.Index); werr != nil {
		return r, werr
	}
	b.kick()
	return r, mapLedgerErr(r.Err)
}

// commitRetry commits c, retrying while nothing could be committed or the
// outcome is unknown (every ledger command is a compare-and-set, so a
// retry never applies a transition twice). When a retry is rejected after
// an unknown outcome, done decides from the committed state whether the
// first try succeeded, and returns its result.
func (b *netBackend) commitRetry(ctx context.Context, c ledger.Command, done func(*ledger.State) (ledger.Result, bool)) (ledger.Result, error) {
	unknown := false
	backoff := 10 * time.Millisecond
	for {
		r, err := b.commit(ctx, c)
		if err != nil && errors.Is(err, ErrNoQuorum) && ctx.Err() == nil && b.ctx.Err() == nil {
			unknown = unknown || errors.Is(err, ownership.ErrLeadershipLost)
			select {
			case <-ctx.Done():
				return r, err
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, b.timing.RenewEvery)
			continue
		}
		if err != nil && unknown && done != nil {
			if r2, ok := done(b.fsm.State()); ok {
				return r2, nil
			}
		}
		return r, err
	}
}

// mapControlErr maps a commit failure to the node's sentinels.
func mapControlErr(err error) error {
	switch {
	case errors.Is(err, ownership.ErrLeadershipLost):
		return fmt.Errorf("%w: outcome unknown: %w", ErrNoQuorum, err)
	case errors.Is(err, ledger.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, ErrUnauthorized):
		return err
	case isInvalid(err):
		// The batcher could not encode the command (a field over the
		// ledger's limits): nothing was proposed, and a retry fails alike.
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", ErrNoQuorum, err)
}

// mapLedgerErr maps a ledger rejection to the node's sentinels, keeping
// the ledger's error (and its details) in the chain.
func mapLedgerErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ledger.ErrStaleEpoch):
		return fmt.Errorf("%w: %w", ErrStaleToken, err)
	case errors.Is(err, ledger.ErrNotOwner):
		return fmt.Errorf("%w: %w", ErrNotOwner, err)
	case errors.Is(err, ledger.ErrJobState), errors.Is(err, ledger.ErrWrongAttempt), errors.Is(err, ledger.ErrJobFinished):
		return fmt.Errorf("%w: %w", ErrJobState, err)
	case errors.Is(err, ledger.ErrUnknownJob):
		return fmt.Errorf("%w: %w", ErrJobNotFound, err)
	case errors.Is(err, ledger.ErrUnknownType):
		return fmt.Errorf("%w: %w", ErrUnknownType, err)
	case errors.Is(err, ledger.ErrQueueFull):
		return fmt.Errorf("%w: %w", ErrQueueFull, err)
	case errors.Is(err, ledger.ErrRequestIDReused):
		return fmt.Errorf("%w: %w", ErrRequestIDReused, err)
	case isInvalid(err):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// isInvalid reports whether the ledger refused a command for its content
// (encoding limits, malformed or invalid fields), not for its moment.
func isInvalid(err error) bool {
	return errors.Is(err, ledger.ErrTooLarge) || errors.Is(err, ledger.ErrMalformed) ||
		errors.Is(err, ledger.ErrInvalid) || errors.Is(err, ledger.ErrVersion) ||
		errors.Is(err, cluster.ErrBadRequest) // the leader's CheckCommand refused it

}

func (b *netBackend) setDraining(ctx context.Context, draining bool) error {
	if err := b.gossip.UpdateMeta(func(m *cluster.Meta) { m.Draining = draining }); err != nil {
		return err
	}
	// The agent proposes the wish now (committed here, so the caller learns
	// the outcome) and again until the node's record agrees.
	_, set, ok := b.stepHold(time.Now(), ownership.DrainWish{Draining: draining}, func(c ledger.Command) bool {
		_, is := c.(ledger.SetDraining)
		return is
	})
	if !ok {
		return ErrClosed
	}
	if set == nil {
		return nil
	}
	_, err := b.commitRetry(ctx, set, nil)
	return err
}

func (b *netBackend) handoff(ctx context.Context, shards []shardEpoch) error {
	in := make([]ownership.AgentInput, len(shards))
	for i, se := range shards {
		in[i] = ownership.ShardDrained{Shard: se.shard, Epoch: se.epoch}
	}
	b.stepAll(time.Now(), in)
	return nil
}

func (b *netBackend) resign(ctx context.Context, s uint32, epoch uint64) error {
	_, err := b.commitRetry(ctx, ledger.Release{Shard: s, Epoch: epoch, Owner: b.id, Now: time.Now().UnixNano(), Avoid: true},
		func(st *ledger.State) (ledger.Result, bool) {
			r, ok := st.Shard(s)
			return ledger.Result{Shard: r}, ok && r.Epoch == epoch && r.State == ledger.ShardUnowned
		})
	return err
}

// withRequestID wraps c in a ledger.Session — with id, or a fresh one when
// id is zero — once the cluster runs ledger.VersionRequestIDs, as this
// node's replica shows it; before that it returns c unchanged (nodes of
// the previous release cannot read a Session) and a zero id.
func (b *netBackend) withRequestID(c ledger.Command, id ledger.RequestID) (ledger.Command, ledger.RequestID) {
	if !b.fsm.State().VersionActive(ledger.VersionRequestIDs) {
		return c, ledger.RequestID{}
	}
	if id.IsZero() {
		id = ledger.NewRequestID()
	}
	return ledger.Session{ID: id, Command: c}, id
}

func (b *netBackend) propose(ctx context.Context, tok Token, typ string, payload []byte, id ledger.RequestID) (Applied, error) {
	c, id := b.withRequestID(ledger.App{Shard: tok.Shard, Epoch: tok.Epoch, Type: typ, Payload: payload, Now: time.Now().UnixNano()}, id)
	var r ledger.Result
	var err error
	if id.IsZero() {
		// Cluster version 1: no request id, so no retry (it could apply
		// the command twice).
		r, err = b.commit(ctx, c)
	} else {
		// A retry with the same id is applied at most once: the ledger
		// answers it with the first application's result.
		r, err = b.commitRetry(ctx, c, nil)
	}
	a := Applied{Index: r.Index, RequestID: id, Replayed: r.Replayed}
	if err != nil {
		return a, err
	}
	a.Result = r.Response
	return a, nil
}

func jobFromRecord(j ledger.JobRecord) Job {
	t := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	return Job{
		ID: j.ID, Shard: j.Shard, Key: j.Key, Type: j.Type, Payload: j.Payload, State: j.State,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Owner: j.Owner, Epoch: j.Epoch,
		Timeout: time.Duration(j.Timeout), Result: j.Result, Error: j.LastError,
		NotBefore: t(j.NotBefore), EnqueuedAt: t(j.EnqueuedAt), StartedAt: t(j.StartedAt), FinishedAt: t(j.FinishedAt),
	}
}

func (b *netBackend) versionActive(v uint32) bool { return b.fsm.State().VersionActive(v) }

// readBarrier asks the control-group leader for a read index and waits
// until this node's replica applied it (the wait lease renewals use).
// Before cluster version 5 the leader does not offer read indexes.
func (b *netBackend) readBarrier(ctx context.Context) error {
	if v := b.fsm.State().ActiveVersion(); v < ledger.VersionJobsAPI {
		return fmt.Errorf("%w: consistent reads need cluster version %d, the cluster runs %d", ErrUnsupported, ledger.VersionJobsAPI, v)
	}
	backoff := 5 * time.Millisecond
	for {
		idx, err := b.ctl.ReadIndex(ctx)
		if err == nil {
			return b.fsm.WaitApplied(ctx, idx)
		}
		if errors.Is(err, cluster.ErrUnauthorized) {
			return fmt.Errorf("%w: %w", ErrUnauthorized, err)
		}
		// No leader, a leader change, a lost confirm round: no barrier
		// yet; ask again (the current leader) until ctx ends.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: read barrier: %w (last: %w)", ErrNoQuorum, ctx.Err(), err)
		case <-b.ctx.Done():
			return ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, b.timing.RenewEvery)
	}
}

func (b *netBackend) enqueueJob(ctx context.Context, shard uint32, spec JobSpec, maxPending int) (Job, bool, error) {
	c := ledger.JobEnqueue{Shard: shard, Key: spec.Key, Type: spec.Type, Payload: spec.Payload,
		MaxAttempts: uint32(spec.MaxAttempts), Now: time.Now().UnixNano(), MaxPending: uint32(min(maxPending, math.MaxUint32))}
	var r ledger.Result
	var err error
	if sc, id := b.withRequestID(c, spec.RequestID); !id.IsZero() {
		// A retry carries the first try's request id, so the ledger answers
		// it with the first application's result: created stays true for
		// the caller whose enqueue created the job, and a job without a key
		// is created once.
		r, err = b.commitRetry(ctx, sc, nil)
	} else if spec.Key != "" {
		// Cluster version 1. Idempotent by key: a retry returns the job
		// the first try created, but as a duplicate (created false).
		r, err = b.commitRetry(ctx, c, nil)
	} else {
		r, err = b.commit(ctx, c)
	}
	if err != nil {
		return Job{}, false, err
	}
	return jobFromRecord(r.Job), !r.Duplicate, nil
}

func (b *netBackend) startJob(ctx context.Context, tok Token, id uint64, attempt uint32, timeout time.Duration) (Job, error) {
	r, err := b.commitRetry(ctx, ledger.JobStart{Shard: tok.Shard, Epoch: tok.Epoch, Owner: b.id, Job: id, Attempt: attempt,
		Timeout: int64(timeout), Now: time.Now().UnixNano()},
		func(st *ledger.State) (ledger.Result, bool) {
			j, ok := st.Job(id)
			return ledger.Result{Job: j}, ok && j.State == ledger.JobStarted && j.Attempt == attempt+1 &&
				j.Owner == b.id && j.Epoch == tok.Epoch
		})
	return jobFromRecord(r.Job), err
}

func (b *netBackend) finishJob(ctx context.Context, tok Token, id uint64, attempt uint32, out jobOutcome) (Job, error) {
	now := time.Now().UnixNano()
	var c ledger.Command = ledger.JobComplete{Shard: tok.Shard, Epoch: tok.Epoch, Job: id, Attempt: attempt, Result: out.result, Now: now}
	if !out.ok {
		c = ledger.JobFail{Shard: tok.Shard, Epoch: tok.Epoch, Job: id, Attempt: attempt, Error: out.reason, Backoff: int64(out.backoff), Now: now}
	}
	r, err := b.commitRetry(ctx, c, func(st *ledger.State) (ledger.Result, bool) {
		j, ok := st.Job(id)
		if !ok || j.Attempt != attempt || j.Epoch != tok.Epoch {
			return ledger.Result{}, false
		}
		if out.ok {
			return ledger.Result{Job: j}, j.State == ledger.JobCompleted
		}
		return ledger.Result{Job: j}, j.State == ledger.JobPending || j.State == ledger.JobDead
	})
	return jobFromRecord(r.Job), err
}

func (b *netBackend) job(id uint64) (Job, bool) {
	j, ok := b.fsm.State().Job(id)
	if !ok {
		return Job{}, false
	}
	return jobFromRecord(j), true
}

func (b *netBackend) jobByKey(shard uint32, key string) (Job, bool) {
	j, ok := b.fsm.State().JobByKey(shard, key)
	if !ok {
		return Job{}, false
	}
	return jobFromRecord(j), true
}

func (b *netBackend) pendingJobs(shard uint32, limit int) int {
	return b.fsm.State().CountJobs(shard, ledger.JobPending, limit)
}

func (b *netBackend) jobs(q JobQuery) []Job {
	st := b.fsm.State()
	var recs []ledger.JobRecord
	if len(q.Shards) > 0 && len(q.States) > 0 {
		shards := slices.Clone(q.Shards)
		slices.Sort(shards)
		for _, s := range slices.Compact(shards) {
			var per []ledger.JobRecord
			for _, js := range q.States {
				per = append(per, st.Jobs(s, js)...)
			}
			slices.SortFunc(per, func(a, b ledger.JobRecord) int { return cmp.Compare(a.ID, b.ID) })
			recs = append(recs, per...)
		}
	} else {
		recs = st.AllJobs()
		slices.SortStableFunc(recs, func(a, b ledger.JobRecord) int { return cmp.Compare(a.Shard, b.Shard) })
	}
	var out []Job
	for _, r := range recs {
		j := jobFromRecord(r)
		if !q.match(j) {
			continue
		}
		out = append(out, j)
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out
}

// splitHostPort splits a host:port address with a numeric port.
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

func (b *netBackend) close(ctx context.Context) error { return b.stop(ctx, true) }

// kill stops the node as a crash would: no leave, no handover (tests).
func (b *netBackend) kill() { _ = b.stop(context.Background(), false) }

func (b *netBackend) stop(ctx context.Context, leave bool) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	var errs []error
	if leave {
		if err := b.gossip.Leave(ctx); err != nil {
			errs = append(errs, fmt.Errorf("leave: %w", err))
		}
	}
	b.cancel()
	// The control group stops first: the batcher's in-flight commits then
	// fail at once instead of retrying towards a leader that may never
	// answer (the batcher's Close waits for them).
	if err := b.stopControl(ctx, leave); err != nil {
		errs = append(errs, fmt.Errorf("control group: %w", err))
	}
	_ = b.batcher.Close()
	b.wg.Wait()
	if err := b.gossip.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("gossip: %w", err))
	}
	if err := b.closeStore(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
