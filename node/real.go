// The real backend's assembly: realBackend builds a node over real gossip,
// Raft and storage (identity, membership and ownership configuration, the
// control group, the agent and leader shells), and stop takes it down. The
// rest of netBackend is by role in real_agent.go (agent shell), leader.go
// (leader shell), real_commit.go (commit path), real_jobs.go (jobs),
// real_view.go (reads) and real_gossip.go (gossip tags and members).

package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	// Words asks the leader for the words relayed to node (cluster version
	// 6, cluster.ControlGroup.Words).
	Words(ctx context.Context, node string) ([]byte, error)
	// SendOwnerWord tells the leader this node's word, cmd its Transfers
	// (cluster version 6, cluster.ControlGroup.SendOwnerWord).
	SendOwnerWord(ctx context.Context, cmd []byte) error
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
	// renewReady is closed when this node next establishes a term as
	// leader (netBackend.renewReady).
	renewReady func() <-chan struct{}
	// words and ownerWord: the handoff on a word (cluster version 6,
	// words.go), as the leader.
	words     func(ctx context.Context, node string) ([]byte, error)
	ownerWord func(p cluster.Peer, authenticated bool, cmd []byte)
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
	loop    *leaderLoop
	// relay holds old owners' words for their targets while this node
	// leads (cluster version 6, words.go); wordStarts counts the shards
	// this node started acting on by a word, before the Transfer applied.
	relay      wordRelay
	wordStarts atomic.Int64
	// loopReady is loop once it exists: renewals can reach the control
	// group before realBackend built the loop.
	loopReady atomic.Pointer[leaderLoop]
	// v4At is the local time this process first saw cluster version 4
	// active in its replica (zero: not yet); the leader's bound is never
	// earlier (design step 9, ownership.EstablishBound).
	v4At atomic.Pointer[time.Time]
	// renewSeen is, on the leader, when it last accepted each node's
	// renewal (what the planner calls lastSeen): the members view under
	// cluster version 4. Guarded by renewMu.
	renewMu   sync.Mutex
	renewSeen map[string]time.Time
	// established is closed and replaced when the leader loop establishes
	// a term; held renewals wait for it (RenewReady). Guarded by renewMu.
	established chan struct{}

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
	// agentSaw is the replica state the agent last observed (stepLatest;
	// ownership.ObservedSince feeds it what changed since).
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

// realBackend assembles a node over real storage, gossip and Raft, in the
// order each step needs the last: the data dir, the replica, gossip, the
// control group and the join, a disk-less member's incarnation, then the
// shells. On an error, what was started is stopped again, in reverse.
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
	if err := b.openDataDir(&cleanup); err != nil {
		return nil, err
	}
	if err := b.newReplica(); err != nil {
		return nil, err
	}
	meta, err := b.startGossip(&cleanup)
	if err != nil {
		return nil, err
	}
	if err := b.startControl(ctx, meta, &cleanup); err != nil {
		return nil, err
	}
	if cfg.diskless() {
		if err := b.claimDiskless(ctx); err != nil {
			return nil, err
		}
	}
	// After the claim: a disk-less member's incarnation is the claimed one.
	cfg.Network.hook(b.fsm, b.id, b.inc)
	if err := b.startShells(); err != nil {
		return nil, err
	}
	return b, nil
}

// openDataDir opens the store and reads the identity and the recorded
// cluster version. The store's file lock makes this process the only one
// using the data dir, which the incarnation counter relies on.
func (b *netBackend) openDataDir(cleanup *[]func()) (err error) {
	b.store, err = b.openStore()
	if err != nil {
		return err
	}
	*cleanup = append(*cleanup, func() { _ = b.closeStore() })
	b.id, b.inc, err = b.loadIdentity()
	if err != nil {
		return err
	}
	if b.id != b.cfg.NodeID {
		return fmt.Errorf("node: data dir %s belongs to node %q, not %q", b.cfg.DataDir, b.id, b.cfg.NodeID)
	}
	if dir := b.versionDir(); dir != "" {
		if b.versionSeen, err = checkVersionFile(dir, b.cfg.speakMax); err != nil {
			return err
		}
	}
	return nil
}

// newReplica builds the ledger replica with the embedder's state machines
// and wakes the agent on every applied entry and on a halt.
func (b *netBackend) newReplica() (err error) {
	cfg := b.cfg
	lc := ledger.DefaultConfig()
	b.fsm, err = ledger.NewFSM(lc)
	if err != nil {
		return err
	}
	for _, typ := range sortedKeys(cfg.StateMachines) {
		if err := b.fsm.RegisterStateMachine(typ, cfg.StateMachines[typ]); err != nil {
			return fmt.Errorf("node: register state machine %q: %w", typ, err)
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
	return nil
}

// startControl starts the control group, joins the seeds and claims the
// node id. The control group starts before the join (gossip must carry
// its Raft address), but bootstraps only after it: a node that has not
// heard from its seeds would take itself for the whole cluster.
func (b *netBackend) startControl(ctx context.Context, meta cluster.Meta, cleanup *[]func()) (err error) {
	cfg := b.cfg
	joined := make(chan struct{})
	b.ctl, err = newControlPlane(controlDeps{cfg: cfg, id: b.id, incarnation: b.inc, fsm: b.fsm, store: b.store, members: b.gossip, timing: b.timing, joined: joined,
		renew: b.serveRenew, renewReady: b.renewReady, words: b.serveWords, ownerWord: b.ownerWord})
	if err != nil {
		return err
	}
	*cleanup = append(*cleanup, func() { _ = b.ctl.Shutdown(context.Background()) })
	if addr := b.ctl.Addr(); addr != "" && addr != meta.RaftAddr {
		if err := b.gossip.UpdateMeta(func(m *cluster.Meta) { m.RaftAddr = addr }); err != nil {
			return fmt.Errorf("node: gossip raft address: %w", err)
		}
	}
	if len(cfg.Seeds) > 0 {
		if _, err := b.gossip.Join(ctx, nil); errors.Is(err, cluster.ErrForeignCluster) {
			return fmt.Errorf("%w: %w", ErrClusterMismatch, err)
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
		return fmt.Errorf("%w: %w", ErrDuplicateID, err)
	} else if err != nil {
		return fmt.Errorf("node: claim node id: %w", err)
	}
	return nil
}

// claimDiskless claims a disk-less member's incarnation through the
// control group and waits for the replica to catch up to the claim. It
// runs after ClaimID: a duplicate must be refused before it claims an
// incarnation, which would fence the live process it duplicates.
func (b *netBackend) claimDiskless(ctx context.Context) (err error) {
	cl, ok := b.ctl.(incarnationClaimer)
	if !ok {
		return fmt.Errorf("node: disk-less member: the control plane cannot claim an incarnation")
	}
	var index uint64
	if b.inc, index, err = b.claimIncarnation(ctx, cl); err != nil {
		_ = b.gossip.Leave(context.Background())
		return err
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
		return fmt.Errorf("node: gossip incarnation: %w", err)
	}
	if err := b.fsm.WaitApplied(ctx, index); err != nil {
		_ = b.gossip.Leave(context.Background())
		return fmt.Errorf("node: disk-less member %q: rebuild the ledger replica up to its claim (index %d): %w", b.id, index, err)
	}
	if err := b.gossip.QueueMeta(func(m *cluster.Meta) { m.Health = 1 }); err != nil {
		return fmt.Errorf("node: gossip health: %w", err)
	}
	if b.cfg.Logger != nil {
		b.cfg.Logger.Info("node: disk-less member registered", "node", b.id, "incarnation", b.inc)
	}
	return nil
}

// startShells builds the agent, the commit batcher and the leader shell,
// and starts their goroutines.
func (b *netBackend) startShells() (err error) {
	b.agent, err = ownership.NewAgent(b.ocfg, b.id, b.inc)
	if err != nil {
		return err
	}
	b.batcher, err = commit.NewBatcher(b.ctl, commit.BatcherConfig{})
	if err != nil {
		return err
	}
	planner, err := ownership.NewPlanner(b.ocfg)
	if err != nil {
		return err
	}
	b.loop = newLeaderLoop(planner, loopProposer{b}, loopSource{b}, loopConfig{Logger: b.cfg.Logger,
		ConfirmBound: b.ctl.EstablishBound, RenewalsSince: b.renewalsSince, OnEstablished: b.termEstablished})
	b.loopReady.Store(b.loop)

	b.goLoop(b.agentLoop)
	b.goLoop(b.membershipLoop)
	b.goLoop(func() { _ = b.loop.Run(b.ctx, b.ctl.Leadership()) })
	return nil
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
