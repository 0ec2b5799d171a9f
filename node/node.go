// The Node type and its lifecycle: Start, Close, the errors Node returns,
// Token and ShardInfo, and the ownership reads (Owner, Shard, Shards).
// The event loop is in node_events.go, waiting helpers in node_wait.go,
// Drain and Undrain in node_drain.go; the backend behind a Node is
// assembled in real.go.

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ring"
)

// Errors returned by Node. Use errors.Is: operations wrap them with detail.
var (
	// ErrClosed: the node (or the subscription, election or worker's node)
	// was closed.
	ErrClosed = errors.New("node: closed")
	// ErrInvalidConfig: Config.Validate found bad values; the error is a
	// *ConfigError naming them.
	ErrInvalidConfig = errors.New("node: invalid config")
	// ErrNotOwner: this node is not acting as owner of the shard right now
	// (not the committed owner, lease not valid, or revoked and drained).
	ErrNotOwner = errors.New("node: not the acting owner")
	// ErrStaleToken: a fenced operation carried a token whose epoch the
	// shard has moved past; it was rejected and not applied.
	ErrStaleToken = errors.New("node: stale fencing token")
	// ErrNotLeader: this node does not lead the election.
	ErrNotLeader = errors.New("node: not the election leader")
	// ErrNoQuorum: the control group has no reachable leader, so nothing can
	// be committed; the operation may be retried.
	ErrNoQuorum = errors.New("node: no control-group quorum")
	// ErrUnknownType: an application command names a type no state machine
	// is registered for.
	ErrUnknownType = errors.New("node: unknown command type")
	// ErrJobNotFound: no job has the id.
	ErrJobNotFound = errors.New("node: job not found")
	// ErrJobState: the job is not in a state that allows the transition
	// (completing a job twice, starting a running job, a stale attempt).
	ErrJobState = errors.New("node: job state does not allow this transition")
	// ErrLostOwnership is the cause (context.Cause) of a WorkFunc's
	// context when its term ended because this node stopped acting as
	// owner. errors.Is(ErrLostOwnership, ErrNotOwner) holds.
	ErrLostOwnership = fmt.Errorf("node: ownership ended: %w", ErrNotOwner)
	// ErrNotLive: this node's liveness is not committed (not yet
	// registered, or expired and re-registering).
	ErrNotLive = errors.New("node: liveness not committed")
	// ErrUnsupported: the operation needs a feature the running cluster
	// does not provide.
	ErrUnsupported = errors.New("node: unsupported")
	// ErrUnauthorized: the control group refused a command because this
	// node's certificate does not allow it (docs/security.md). Not retried.
	ErrUnauthorized = errors.New("node: not authorized")
	// ErrInvalid: the node refuses the input itself — a key, type or
	// other string over ledger.MaxStringLen, a payload over the ledger's
	// payload limit, a field value the ledger does not accept, a gossip key
	// of the wrong size. The error wraps the cause (ledger.ErrTooLarge,
	// ledger.ErrInvalid, ...). Never retried: the same input fails the
	// same way.
	ErrInvalid = errors.New("node: invalid input")
	// ErrQueueFull: the job's shard already holds Config.MaxPendingJobs
	// pending jobs. From cluster version 5 the ledger decides it on the
	// committed state (exact under concurrent enqueues through several
	// nodes); before, the enqueuing node checks its replica before
	// proposing, so concurrent enqueues may overshoot it by a few jobs.
	// Nothing was enqueued. Retry later.
	ErrQueueFull = errors.New("node: too many pending jobs on the shard")
	// ErrRequestIDReused: the request id (JobSpec.RequestID,
	// WithRequestID) was used for another request — another body, command
	// or shard — within the session window (cluster version 5). Nothing
	// was applied. Use a fresh id per logical request.
	ErrRequestIDReused = errors.New("node: request id reused with another request")
	// ErrClusterMismatch: Start joined seeds that belong to another cluster
	// or disagree on a setting every node must share (Cluster, Partitions).
	// The message names the peer and the setting.
	ErrClusterMismatch = errors.New("node: seeds belong to another cluster or disagree on its settings")
	// ErrIdentityConflict: Start found this node id already registered
	// with the control group at a newer incarnation than this process's,
	// before this process ever registered: its data dir was wiped or
	// replaced while the id is still a member (or another process runs
	// under the same id). The node would have lost its Raft term and vote;
	// start it under a new node id (docs/operations.md, "Damaged storage").
	ErrIdentityConflict = errors.New("node: identity conflict")
	// ErrDuplicateID: Start found another live process using this node's
	// NodeID (it answers gossip probes at another address) and refused to
	// join; the other process is not affected. The message names its
	// address. A restart after a crash is not a duplicate
	// (docs/operations.md).
	ErrDuplicateID = errors.New("node: node id already in use by another live process")
	// ErrDisklessUnsupported: a disk-less member (Config.Diskless, or no
	// DataDir with Voter=never) cannot start because the cluster runs a
	// version older than ledger.VersionDisklessMembers: it could not be
	// given an incarnation. Finish the cluster's upgrade first
	// (docs/upgrades.md), or give the node a DataDir.
	ErrDisklessUnsupported = errors.New("node: the cluster does not run disk-less members yet")
	// ErrVersionMismatch: this binary cannot run at the cluster's active
	// version (the cluster was finalized past it, or this data dir was last
	// run at a newer version). The message names both; docs/upgrades.md.
	ErrVersionMismatch = errors.New("node: this binary cannot run at the cluster's version")
	// ErrNoOwner: the key's shard has no valid committed owner right now
	// (never granted, released, or its owner's lease lapsed and a
	// failover is due); OwnerAddr answers it. Retry after about a lease.
	ErrNoOwner = errors.New("node: shard has no valid owner")
	// ErrNoAddress: the shard's owner advertises no HTTP address
	// (Config.HTTPAddr) or is not a live gossip member here (OwnerAddr).
	ErrNoAddress = errors.New("node: owner advertises no address")
)

// Token is a fencing token: the shard and the epoch this node owns it at.
// Pass it with every side effect a shard's owner performs so the receiving
// system can reject writes from an older epoch: epochs of one shard only
// increase, and at most one node owns a shard at any epoch.
type Token struct {
	Shard uint32
	Epoch uint64
}

// String formats the token as "shard/epoch", e.g. "17/4".
func (t Token) String() string { return fmt.Sprintf("%d/%d", t.Shard, t.Epoch) }

// IsZero reports whether t is the zero Token (no ownership).
func (t Token) IsZero() bool { return t == Token{} }

// Newer reports whether t supersedes u: same shard, higher epoch. A
// downstream system keeps the highest token it has seen per shard and
// refuses writes carrying an older one.
func (t Token) Newer(u Token) bool { return t.Shard == u.Shard && t.Epoch > u.Epoch }

// ShardState is the committed state of a shard (the one definition is
// ledger.ShardState).
type ShardState = ledger.ShardState

// The shard states (see docs/protocol.md).
const (
	// ShardUnowned: no node may act on the shard.
	ShardUnowned = ledger.ShardUnowned
	// ShardOwned: the owner acts while its lease is valid.
	ShardOwned = ledger.ShardOwned
	// ShardRevoking: the owner was asked to hand the shard over and acts
	// only to drain it, until it releases it or its drain timeout ends.
	ShardRevoking = ledger.ShardRevoking
)

// ShardInfo is one shard's committed ownership as this node's replica
// shows it, plus whether this node acts on it.
type ShardInfo struct {
	Shard uint32
	// Epoch is the shard's fencing epoch.
	Epoch uint64
	// Owner is the committed owner ("" if never owned; after a release it
	// still names the previous owner while State is ShardUnowned).
	Owner string
	State ShardState
	// Target is the node a revocation hands the shard to, if decided.
	Target string
	// Valid reports whether the owner's liveness still backs the ownership.
	Valid bool
	// Acting reports whether this node acts on the shard right now.
	Acting bool
	// LeaseRemaining is how long this node may keep acting on the shard
	// without another renewal (0 unless Acting).
	LeaseRemaining time.Duration
	// Election is the name of the group-scoped election held on this
	// shard, "" for ordinary shards.
	Election string
	// ChangedAt is the proposer's clock at the last change (display only).
	ChangedAt time.Time
	// Reason is a short human reason for the last change.
	Reason string
	// Fenced reports that the shard is under fenced takeover
	// (SetFencedTakeover): a successor may be granted it before its
	// owner's lease ends, so only its fencing token keeps a stale owner's
	// writes out (S4 waived; docs/guarantees.md).
	Fenced bool
}

// Token returns the shard's current fencing token.
func (s ShardInfo) Token() Token { return Token{Shard: s.Shard, Epoch: s.Epoch} }

// Node is a running member of a tenure cluster. All methods are safe for
// concurrent use. Create one with Start and stop it with Close.
type Node struct {
	cfg    Config
	timing Timing
	log    *slog.Logger
	be     backend

	events    hub[Event]
	jobEvents hub[JobEvent]

	kick chan struct{} // wakes the loop; capacity 1
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	refreshMu sync.Mutex // serialises refresh so events keep their order
	// viewGen is the ledger's OwnershipGeneration of refresh's last full
	// pass (0: none yet), ownRecs that pass's records of the shards this
	// node owned (refresh's fast path re-checks only their acting state).
	// Guarded by refreshMu.
	viewGen uint64
	ownRecs []ShardInfo
	// shardsGen is ShardsGeneration: moved by every refresh that re-read
	// the table or changed the view.
	shardsGen atomic.Uint64
	// shardFeed is what each move of shardsGen was about (ShardsSince).
	shardFeed shardFeed

	mu         sync.Mutex
	closing    bool          // Close or kill started
	closed     bool          // the node no longer acts
	changed    chan struct{} // closed and replaced after every refresh
	view       map[uint32]shardView
	elections  map[string]*Election // by key (scope/name)
	health     float64
	healthMeta map[string]string
	healthAt   time.Time

	loadMu       sync.Mutex         // guards loads and loadGossiped (taken before mu)
	loads        map[uint32]float64 // ReportLoad's values (load.go)
	loadGossiped string             // the load tag last gossiped
	jobSeen      map[uint64]jobVersion
	jobIndex     uint64            // applied index of the last job diff
	active       map[uint32]int    // shard -> running workers
	handing      map[uint32]uint64 // shard -> epoch a handoff was started for
}

// shardView is what the loop last published about a shard.
type shardView struct {
	owner  string
	epoch  uint64
	acting bool
}

type jobVersion struct {
	state   JobState
	attempt uint32
}

// Start starts a node, joins the cluster and returns once the node is
// registered with the control group (its first heartbeat committed), so
// ownership queries are meaningful. A new cluster forms only when
// BootstrapExpect nodes see each other, so start the first nodes
// concurrently (as separate processes do). ctx bounds only the start;
// cancel it to give up joining.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Network != nil {
		cfg = cfg.Network.place(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	timing, _ := cfg.Profile.Timing()
	n := &Node{
		cfg:     cfg,
		timing:  timing,
		log:     cfg.Logger,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
		view:    make(map[uint32]shardView),
		health:  1,
		jobSeen: make(map[uint64]jobVersion),

		active:  make(map[uint32]int),
		handing: make(map[uint32]uint64),
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.log = n.log.With("node", cfg.NodeID)
	n.elections = make(map[string]*Election)
	be, err := realBackend(ctx, cfg, n.notify)
	if err != nil {
		return nil, err
	}
	if cfg.Network != nil && cfg.Network.wrap != nil {
		be = cfg.Network.wrap(be)
	}
	n.be = be
	if err := n.waitRegistered(ctx); err != nil {
		_ = be.close(context.Background())
		return nil, err
	}
	n.refresh(time.Now())
	n.wg.Add(1)
	go n.loop()
	return n, nil
}

func (n *Node) waitRegistered(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		li := n.be.lease()
		if li.registered {
			return nil
		}
		if li.conflict != nil {
			return fmt.Errorf("node: start %s: %w", n.cfg.NodeID, li.conflict)
		}
		if h := n.be.control().halted; h != "" {
			return fmt.Errorf("node: start %s: %w: the ledger replica stopped applying: %s (start a binary that reads it; docs/upgrades.md)",
				n.cfg.NodeID, ErrVersionMismatch, h)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: start %s: not registered with the control group: %w", n.cfg.NodeID, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Close drains the node (hands its shards over, see Drain), leaves the
// cluster and stops. ctx bounds the drain: when it ends, Close stops
// anyway and the control group reassigns the remaining shards once their
// leases expire. Workers' contexts are cancelled before Close returns.
// Close returns ErrClosed if the node was already closed.
func (n *Node) Close(ctx context.Context) error {
	if !n.beginClose() {
		return ErrClosed
	}
	drainErr := n.drainForClose(ctx)
	n.markClosed()
	n.wg.Wait()
	// Publish the final losses so subscribers and workers see them.
	n.refresh(time.Now())
	err := n.be.close(ctx)
	n.closeHubs()
	if drainErr != nil && ctx.Err() == nil {
		return errors.Join(drainErr, err)
	}
	return err
}

// beginClose reports whether this call is the first to close the node.
func (n *Node) beginClose() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return false
	}
	n.closing = true
	return true
}

// kill stops the node without draining or leaving, as a crash would; for
// tests. Backends that cannot crash are closed.
func (n *Node) kill() {
	if !n.beginClose() {
		return
	}
	n.markClosed()
	if k, ok := n.be.(interface{ kill() }); ok {
		k.kill()
	} else {
		_ = n.be.close(context.Background())
	}
	n.wg.Wait()
	n.refresh(time.Now())
	n.closeHubs()
}

// markClosed marks the node closed and closes Done.
func (n *Node) markClosed() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	close(n.done)
}

// closeHubs ends every subscription: ownership and job events and each
// election's.
func (n *Node) closeHubs() {
	n.events.close()
	n.jobEvents.close()
	n.mu.Lock()
	for _, e := range n.elections {
		e.hub.close()
	}
	n.mu.Unlock()
}

// Done returns a channel closed when Close starts shutting the node down.
func (n *Node) Done() <-chan struct{} { return n.done }

// ID returns the node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Group returns the node's group.
func (n *Node) Group() string { return n.cfg.Group }

// Incarnation returns this process's incarnation of the node id (it grows
// by one at every start).
func (n *Node) Incarnation() uint64 { return n.be.incarnation() }

// Partitions returns the number of shards keys hash onto.
func (n *Node) Partitions() int { return n.cfg.Partitions }

// Timing returns the lease timing of the node's profile.
func (n *Node) Timing() Timing { return n.timing }

// ShardFor maps a key (a tenant id, a queue name, a job key) to its shard.
// The mapping depends only on the key and Partitions, so every node and
// every process agrees on it.
func (n *Node) ShardFor(key string) uint32 { return ShardFor(n.cfg.Partitions, key) }

// ShardFor maps key onto one of partitions shards (xxhash64 of the key
// modulo partitions, ring.ShardFor), the same function Node.ShardFor uses.
func ShardFor(partitions int, key string) uint32 {
	return ring.ShardFor(partitions, []byte(key))
}

// IsOwner reports whether this node acts as owner of shard right now: it is
// the committed owner, its lease is valid by its own clock, and the shard
// is not revoked-and-drained. The answer can change right after the call;
// use Token and pass it downstream, or run work with RunPerShard, whose
// context ends when ownership does.
func (n *Node) IsOwner(shard uint32) bool {
	_, ok := n.Token(shard)
	return ok == nil
}

// Owner returns the committed owner of shard, or "" if it has none. The
// committed owner may not be acting yet (or any more); see IsOwner.
func (n *Node) Owner(shard uint32) string {
	rec, ok := n.be.shard(shard)
	if !ok || rec.State == ShardUnowned || !rec.Valid {
		return ""
	}
	return rec.Owner
}

// Shard returns shard's committed record and this node's acting state.
func (n *Node) Shard(shard uint32) ShardInfo {
	rec, ok := n.be.shard(shard)
	if !ok {
		rec = ShardInfo{Shard: shard}
	}
	return n.decorate(rec, time.Now())
}

// Shards returns every shard's committed record, sorted by shard.
func (n *Node) Shards() []ShardInfo {
	now := time.Now()
	recs := n.be.shards()
	for i := range recs {
		recs[i] = n.decorate(recs[i], now)
	}
	return recs
}

// ShardsGeneration is a number that moves whenever Shards may answer
// differently in anything but LeaseRemaining: a shard record or an owner's
// validity changed in the replica, or this node's acting set changed. It
// moves once the node's loop has seen the change, right after the change
// itself; so a reader that derives something from Shards (a metrics
// sampler) reads the number first, then Shards, and needs to read Shards
// again only once the number moved.
func (n *Node) ShardsGeneration() uint64 { return n.shardsGen.Load() }

// decorate fills rec's acting state. A node acts only on shards whose
// committed record names it (the backend's acting state follows the
// latest applied record), so the others are answered without asking.
func (n *Node) decorate(rec ShardInfo, now time.Time) ShardInfo {
	if rec.Owner != n.cfg.NodeID {
		return rec
	}
	if _, until, err := n.actingToken(rec.Shard, now); err == nil {
		rec.Acting = true
		rec.LeaseRemaining = until.Sub(now)
	}
	return rec
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}
