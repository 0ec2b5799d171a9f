package cluster

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/rpc"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// Errors returned by the control group. Match them with errors.Is.
var (
	// ErrNoLeader: no Raft leader was known before the context ended. The
	// command was not submitted.
	ErrNoLeader = errors.New("cluster: no raft leader")
	// ErrNotLeader: this node is not the Raft leader (leader-only call).
	ErrNotLeader = errors.New("cluster: not the raft leader")
	// ErrLeadershipLost: the command reached a leader that lost leadership
	// (or the connection to it broke) before the outcome was known. The
	// command may or may not be committed. It is never retried silently;
	// ledger commands are compare-and-set on epochs, so the caller may retry.
	ErrLeadershipLost = errors.New("cluster: leadership lost, outcome unknown")
	// ErrTimeout: the context ended while the command was in flight; the
	// outcome is unknown if it had been submitted.
	ErrTimeout = errors.New("cluster: timed out")
	// ErrControlClosed: the control group is shut down.
	ErrControlClosed = errors.New("cluster: control group closed")
	// ErrBadResponse: the FSM returned a response that cannot cross the RPC.
	ErrBadResponse = errors.New("cluster: unsupported fsm response type")
	// ErrQuorumRisk: a removal would leave fewer voters than a quorum of the
	// configured voter count.
	ErrQuorumRisk = errors.New("cluster: removal would leave fewer voters than a quorum")
	// ErrUnknownServer: the id is not in the Raft configuration.
	ErrUnknownServer = errors.New("cluster: server not in raft configuration")
	// ErrBadControlConfig: ControlConfig.Validate failed.
	ErrBadControlConfig = errors.New("cluster: invalid control config")
	// ErrBadIdentity: a node id or identity file is invalid.
	ErrBadIdentity = errors.New("cluster: invalid identity")
	// ErrBadRequest: a malformed RPC request.
	ErrBadRequest = errors.New("cluster: malformed rpc request")
	// ErrUnauthorized: the leader refused a forwarded command or removal
	// because the sender's proven identity may not do it (see
	// ControlConfig.Authorize). Not submitted; never worth retrying.
	ErrUnauthorized = errors.New("cluster: not authorized")
)

// FSMError is returned by Apply when the FSM's Apply returned an error value
// as its response. Locally Err is that error; for a forwarded command only
// its message crosses the wire (Err is then a plain error with that text).
type FSMError struct {
	Index uint64 // log index of the command
	Err   error
}

func (e *FSMError) Error() string {
	return fmt.Sprintf("cluster: fsm error at index %d: %v", e.Index, e.Err)
}
func (e *FSMError) Unwrap() error { return e.Err }

// EventStream is a subscription to coalesced membership events.
type EventStream interface {
	C() <-chan []Event
	Dropped() uint64
	Close()
}

// PeerSource is what the control group needs from gossip membership: the
// current members (sorted by ID, including this node) and a subscription to
// membership changes. Use AdaptPeers when Subscribe returns a concrete type.
type PeerSource interface {
	Members() []Member
	Subscribe(buffer int) EventStream
}

// AdaptPeers turns a membership whose Subscribe returns a concrete
// subscription type S into a PeerSource:
//
//	peers := cluster.AdaptPeers[*cluster.Subscription](membership)
func AdaptPeers[S EventStream](m interface {
	Members() []Member
	Subscribe(buffer int) S
}) PeerSource {
	return peerAdapter[S]{m}
}

type peerAdapter[S EventStream] struct {
	m interface {
		Members() []Member
		Subscribe(buffer int) S
	}
}

func (a peerAdapter[S]) Members() []Member                { return a.m.Members() }
func (a peerAdapter[S]) Subscribe(buffer int) EventStream { return a.m.Subscribe(buffer) }

// ControlConfig configures a ControlGroup. Start from DefaultControlConfig,
// FastControlConfig or TestControlConfig and fill in the node-specific fields.
type ControlConfig struct {
	NodeID      string // stable node id (LoadIdentity); the Raft server id
	Incarnation uint64 // process incarnation; lets a left node come back

	// BindAddr is the Raft+RPC listen address (host:port; port 0 picks one).
	// Unused when StreamLayer is set.
	BindAddr string
	// AdvertiseAddr is the address peers dial; "" = the bound address. It is
	// what the node must gossip as Meta.RaftAddr (see ControlGroup.Addr).
	AdvertiseAddr string

	// BootstrapExpect is the number of voters the cluster is formed with
	// (1, 3 or 5); 0 means never bootstrap (only join an existing cluster).
	BootstrapExpect int
	// MaxVoters is the number of voters the reconcile loop keeps (odd, ≥
	// BootstrapExpect). Other nodes are non-voters.
	MaxVoters int
	// Voter is this node's own VoterPreference ("" = VoterAuto). The
	// reconcile loop reads every node's preference from gossip
	// (Meta.Tags[TagVoter]), so the node must gossip the same value; this
	// field covers the moments before gossip lists the node itself
	// (bootstrap).
	Voter VoterPreference

	// FSM is the state machine. Its Apply response must be nil, []byte, an
	// error, or implement encoding.BinaryMarshaler: the bytes are what
	// Apply returns, locally and to forwarded callers alike.
	FSM           raft.FSM
	LogStore      raft.LogStore
	StableStore   raft.StableStore
	SnapshotStore raft.SnapshotStore

	// StreamLayer carries Raft and RPC (multiplexed by a first byte); nil =
	// plain TCP on BindAddr. Wrap it with NewTLSStreamLayer for TLS.
	StreamLayer StreamLayer
	// Authenticate, if set, proves who is on the other end of every
	// accepted connection before any Raft or RPC byte is read (mutual TLS:
	// TLSAuthenticator). Raft messages must then carry the proven id and
	// forwarded commands pass Authorize. nil trusts every peer: only for
	// loopback clusters, tests and an explicit insecure mode.
	Authenticate func(ctx context.Context, c net.Conn) (Peer, error)
	// Authorize, with Authenticate, decides on the leader whether the proven
	// peer may have cmd (a forwarded Apply) proposed; an error refuses it
	// with ErrUnauthorized. It runs after the leader has applied everything
	// committed when the request arrived. nil allows every command.
	Authorize func(p Peer, cmd []byte) error
	// CheckCommand, if set, checks every command before this node proposes it
	// as leader (local or forwarded, authenticated or not); an error
	// refuses it with ErrBadRequest. A replica that cannot read a committed
	// entry must stop applying (every replica must apply the same log), so
	// bytes that do not decode must never reach the log.
	CheckCommand func(cmd []byte) error
	// MaxRPCMessage bounds one RPC message in bytes (DefaultMaxRPCMessage
	// if 0); RPCIdleTimeout and RPCMessageTimeout bound the time between
	// requests and within one (defaults if 0).
	MaxRPCMessage     int
	RPCIdleTimeout    time.Duration
	RPCMessageTimeout time.Duration

	// Transport, if set, carries Raft instead of the StreamLayer (which then
	// carries only RPC): RaftMemNetwork.Transport in tests and simulation.
	// It requires a StreamLayer whose address equals its LocalAddr.
	Transport raft.Transport

	// Raft timings.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64

	// ReconcileInterval is how often the leader reconciles even without
	// membership events; BootstrapInterval how often an unbootstrapped node
	// re-checks whether it can bootstrap.
	ReconcileInterval time.Duration
	BootstrapInterval time.Duration
	// RPCTimeout bounds internal RPCs (status probes, leave) and raft
	// configuration changes.
	RPCTimeout time.Duration
	// DeadVoterTimeout: a voter that gossip has not seen alive for this long
	// (by the leader's clock, restarted at every leadership change) is
	// replaced by a healthy non-voter. 0 = only RemoveServer replaces voters.
	DeadVoterTimeout time.Duration
	// CatchUpLag is how many entries behind the leader's commit index a
	// non-voter may be and still be promoted.
	CatchUpLag uint64

	// Logger receives the control group's and Raft's logs; nil = discard.
	Logger *slog.Logger
}

// DefaultControlConfig is for LAN deployments: Raft's default timings, 3
// voters, dead voters replaced after 30 minutes.
func DefaultControlConfig() ControlConfig {
	return ControlConfig{
		BootstrapExpect:    3,
		MaxVoters:          3,
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		SnapshotInterval:   120 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		ReconcileInterval:  10 * time.Second,
		BootstrapInterval:  time.Second,
		RPCTimeout:         10 * time.Second,
		DeadVoterTimeout:   30 * time.Minute,
		CatchUpLag:         256,
	}
}

// FastControlConfig is for a low-latency network (one data centre, local
// demo): faster failure detection at the cost of more spurious elections
// under load.
func FastControlConfig() ControlConfig {
	c := DefaultControlConfig()
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
	c.ReconcileInterval = 2 * time.Second
	c.BootstrapInterval = 200 * time.Millisecond
	c.RPCTimeout = 5 * time.Second
	c.DeadVoterTimeout = 5 * time.Minute
	return c
}

// TestControlConfig is for tests: scaled-down timings that still tolerate a
// loaded machine; dead voters are never replaced automatically.
func TestControlConfig() ControlConfig {
	c := DefaultControlConfig()
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotInterval = 5 * time.Second
	c.SnapshotThreshold = 1024
	c.TrailingLogs = 256
	c.ReconcileInterval = 500 * time.Millisecond
	c.BootstrapInterval = 50 * time.Millisecond
	c.RPCTimeout = 5 * time.Second
	c.DeadVoterTimeout = 0
	return c
}

// Validate reports the first invalid field, naming its value.
func (c ControlConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadControlConfig, fmt.Sprintf(format, args...))
	}
	if err := ValidateNodeID(c.NodeID); err != nil {
		return bad("NodeID: %v", err)
	}
	if c.StreamLayer == nil && c.BindAddr == "" {
		return bad("BindAddr is empty and no StreamLayer is set")
	}
	if c.StreamLayer == nil && c.AdvertiseAddr == "" {
		if host, _, err := net.SplitHostPort(c.BindAddr); err != nil {
			return bad("BindAddr %q: %v", c.BindAddr, err)
		} else if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return bad("BindAddr %q is unspecified and AdvertiseAddr is empty", c.BindAddr)
		}
	}
	if c.Transport != nil && c.StreamLayer == nil {
		return bad("Transport is set without a StreamLayer: RPC must listen at the Raft address")
	}
	if c.Transport != nil && string(c.Transport.LocalAddr()) != c.StreamLayer.Addr().String() {
		return bad("Transport address %q differs from StreamLayer address %q", c.Transport.LocalAddr(), c.StreamLayer.Addr())
	}
	if c.MaxVoters < 1 || c.MaxVoters > 9 || c.MaxVoters%2 == 0 {
		return bad("MaxVoters = %d, want 1, 3, 5, 7 or 9", c.MaxVoters)
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > c.MaxVoters {
		return bad("BootstrapExpect = %d, want 0..MaxVoters (%d)", c.BootstrapExpect, c.MaxVoters)
	}
	if _, err := ParseVoterPreference(string(c.Voter)); err != nil {
		return bad("Voter: %v", err)
	}
	if c.FSM == nil || c.LogStore == nil || c.StableStore == nil || c.SnapshotStore == nil {
		return bad("FSM, LogStore, StableStore and SnapshotStore are required")
	}
	if c.HeartbeatTimeout < 5*time.Millisecond || c.ElectionTimeout < 5*time.Millisecond || c.CommitTimeout <= 0 {
		return bad("HeartbeatTimeout %v, ElectionTimeout %v (≥ 5ms) and CommitTimeout %v (> 0) required",
			c.HeartbeatTimeout, c.ElectionTimeout, c.CommitTimeout)
	}
	if c.LeaderLeaseTimeout < 5*time.Millisecond || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("LeaderLeaseTimeout = %v, want 5ms..HeartbeatTimeout (%v)", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return bad("ElectionTimeout %v < HeartbeatTimeout %v", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.SnapshotInterval < 5*time.Millisecond || c.SnapshotThreshold == 0 {
		return bad("SnapshotInterval %v (≥ 5ms) and SnapshotThreshold %d (> 0) required", c.SnapshotInterval, c.SnapshotThreshold)
	}
	if c.ReconcileInterval <= 0 || c.BootstrapInterval <= 0 || c.RPCTimeout <= 0 {
		return bad("ReconcileInterval %v, BootstrapInterval %v, RPCTimeout %v must be > 0",
			c.ReconcileInterval, c.BootstrapInterval, c.RPCTimeout)
	}
	if c.MaxRPCMessage < 0 || (c.MaxRPCMessage > 0 && c.MaxRPCMessage < 64<<10) || c.RPCIdleTimeout < 0 || c.RPCMessageTimeout < 0 {
		return bad("MaxRPCMessage %d (0 or ≥ 64 KiB), RPCIdleTimeout %v and RPCMessageTimeout %v (≥ 0)",
			c.MaxRPCMessage, c.RPCIdleTimeout, c.RPCMessageTimeout)
	}
	if c.DeadVoterTimeout < 0 || (c.DeadVoterTimeout > 0 && c.DeadVoterTimeout < 2*c.ElectionTimeout) {
		return bad("DeadVoterTimeout = %v, want 0 (off) or ≥ 2×ElectionTimeout (%v)", c.DeadVoterTimeout, 2*c.ElectionTimeout)
	}
	return nil
}

// Applied is the result of a committed command.
type Applied struct {
	Index    uint64 // Raft log index of the command
	Response []byte // the FSM's response, marshalled (see ControlConfig.FSM)
}

// LeadershipEvent reports this node gaining or losing established
// leadership. Leader=true is sent only after a Barrier in that term
// succeeded: the local FSM has applied every entry of earlier terms.
type LeadershipEvent struct {
	Leader bool
	Term   uint64
}

// ServerInfo is one server of the Raft configuration.
type ServerInfo struct {
	ID    string
	Addr  string
	Voter bool
}

// ControlGroup is one node's member of the Raft control group: it forms the
// cluster (bootstrap-expect), keeps the Raft configuration in line with
// membership while leader, and forwards proposals to the leader.
type ControlGroup struct {
	cfg   ControlConfig
	log   *slog.Logger
	peers PeerSource
	sub   EventStream
	raft  *raft.Raft
	trans raft.Transport
	mux   *mux
	pool  *rpcPool
	addr  string

	notifyCh     chan bool
	notifyLatest atomic.Bool
	notifySig    chan struct{}
	reconcileSig chan struct{}
	bootstrapSig chan struct{}

	established atomic.Uint64 // term of established leadership, 0 if none
	inc         atomic.Uint64 // process incarnation (cfg.Incarnation, SetIncarnation)

	mu   sync.Mutex
	left map[string]uint64 // id → incarnation that left (or was removed)

	events *eventQueue

	// leaderChange is closed (and replaced) whenever Raft observes a
	// leader change; forwarded commands watch it (see applyRemote).
	leaderMu     sync.Mutex
	leaderChange chan struct{}
	observer     *raft.Observer

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// NewControlGroup starts this node's Raft server, its RPC endpoint and the
// background loops. peers may be nil (a single node that never reconciles).
func NewControlGroup(cfg ControlConfig, peers PeerSource) (*ControlGroup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxRPCMessage == 0 {
		cfg.MaxRPCMessage = DefaultMaxRPCMessage
	}
	if cfg.RPCIdleTimeout == 0 {
		cfg.RPCIdleTimeout = DefaultRPCIdleTimeout
	}
	if cfg.RPCMessageTimeout == 0 {
		cfg.RPCMessageTimeout = DefaultRPCMessageTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.NodeID)
	g := &ControlGroup{
		cfg:          cfg,
		log:          log,
		peers:        peers,
		notifyCh:     make(chan bool, 8),
		notifySig:    make(chan struct{}, 1),
		reconcileSig: make(chan struct{}, 1),
		bootstrapSig: make(chan struct{}, 1),
		left:         map[string]uint64{},
		events:       newEventQueue(),
		closing:      make(chan struct{}),
	}
	g.inc.Store(cfg.Incarnation)

	stream := cfg.StreamLayer
	if stream == nil {
		s, err := NewTCPStreamLayer(cfg.BindAddr, cfg.AdvertiseAddr)
		if err != nil {
			return nil, err
		}
		stream = s
	}
	if cfg.Authenticate != nil {
		stream = &checkedDialer{StreamLayer: stream, check: g.checkDialed}
	}
	if err := rpc.NewServer().RegisterName("Control", &controlRPC{g: g}); err != nil {
		_ = stream.Close()
		return nil, fmt.Errorf("cluster: register rpc: %w", err)
	}
	g.mux = newMux(stream, muxOptions{
		server: func(p Peer, authenticated bool) *rpc.Server {
			// One server per connection, so each call knows its peer.
			srv := rpc.NewServer()
			_ = srv.RegisterName("Control", &controlRPC{g: g, peer: p, authenticated: authenticated})
			return srv
		},
		authenticate: cfg.Authenticate,
		leader: func() string {
			_, id := g.raft.LeaderWithID()
			return string(id)
		},
		maxMessage:  cfg.MaxRPCMessage,
		idleTimeout: cfg.RPCIdleTimeout,
		msgTimeout:  cfg.RPCMessageTimeout,
	}, cfg.Transport == nil, log)
	g.pool = newRPCPool(stream, cfg.MaxRPCMessage)
	g.addr = stream.Addr().String()

	hlog := newRaftLogger(log)
	g.trans = cfg.Transport
	if g.trans == nil {
		g.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  g.mux.raft,
			MaxPool: 3,
			Timeout: cfg.RPCTimeout,
			Logger:  hlog,
		})
	}

	hasState, err := raft.HasExistingState(cfg.LogStore, cfg.StableStore, cfg.SnapshotStore)
	if err != nil {
		g.mux.close()
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = g.notifyCh
	rc.Logger = hlog
	rc.ShutdownOnRemove = false // a removed node stays up as a follower and can be re-added
	r, err := raft.NewRaft(rc, cfg.FSM, cfg.LogStore, cfg.StableStore, cfg.SnapshotStore, g.trans)
	if err != nil {
		g.mux.close()
		if c, ok := g.trans.(raft.WithClose); ok {
			_ = c.Close()
		}
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	g.raft = r
	g.leaderChange = make(chan struct{})
	obs := make(chan raft.Observation, 16)
	g.observer = raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(g.observer)
	g.goLoop(func() { g.leaderWatchLoop(obs) })
	g.mux.start()

	if peers != nil {
		g.sub = peers.Subscribe(64)
	}
	g.goLoop(g.notifyLoop)
	g.goLoop(g.leaderLoop)
	g.goLoop(g.events.run(g.closing))
	if g.sub != nil {
		g.goLoop(g.membershipLoop)
	}
	if !hasState && cfg.BootstrapExpect > 0 && peers != nil {
		g.goLoop(g.bootstrapLoop)
	}
	log.Info("cluster: control group started", "addr", g.addr, "existing_state", hasState)
	return g, nil
}

// leaderWatchLoop turns Raft's leader observations into closes of
// leaderChange. The observer never blocks Raft: an observation dropped on
// a full channel only delays a forwarded command's cancellation to its
// own deadline.
func (g *ControlGroup) leaderWatchLoop(obs <-chan raft.Observation) {
	defer g.raft.DeregisterObserver(g.observer)
	for {
		select {
		case <-obs:
			g.leaderMu.Lock()
			close(g.leaderChange)
			g.leaderChange = make(chan struct{})
			g.leaderMu.Unlock()
		case <-g.closing:
			return
		}
	}
}

// leaderChanged returns a channel closed at the next leader change.
func (g *ControlGroup) leaderChanged() <-chan struct{} {
	g.leaderMu.Lock()
	defer g.leaderMu.Unlock()
	return g.leaderChange
}

// whileLeader returns a context that ends with ctx or as soon as this
// node sees a leader other than addr (or none). A command forwarded to a
// leader that died without closing its connections (a host gone, no TCP
// reset) would otherwise wait for its whole deadline — or forever without
// one — while a new leader is already serving.
func (g *ControlGroup) whileLeader(ctx context.Context, addr string) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			ch := g.leaderChanged()
			if _, cur := g.Leader(); cur != addr {
				cancel(fmt.Errorf("leader changed from %s to %q", addr, cur))
				return
			}
			select {
			case <-ch:
			case <-wctx.Done():
				return
			case <-g.closing:
				return
			}
		}
	}()
	return wctx, func() { cancel(nil) }
}

func (g *ControlGroup) goLoop(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Addr is the address Raft and RPC listen on as peers see it; gossip it as
// Meta.RaftAddr.
func (g *ControlGroup) Addr() string { return g.addr }

// ID is this node's id.
func (g *ControlGroup) ID() string { return g.cfg.NodeID }

// IsLeader reports whether Raft considers this node the leader right now.
// Consumers that act as leader should follow Leadership instead.
func (g *ControlGroup) IsLeader() bool { return g.raft.State() == raft.Leader }

// Leader returns the current leader's id and address, "" if none is known.
func (g *ControlGroup) Leader() (id, addr string) {
	a, i := g.raft.LeaderWithID()
	return string(i), string(a)
}

// TransferLeadership hands leadership to the most up-to-date voter when
// this node leads, and waits (within ctx) until another node leads: a
// planned stop of the leader then costs a hand-over instead of an
// election timeout. It returns nil when this node is not the leader.
func (g *ControlGroup) TransferLeadership(ctx context.Context) error {
	if g.raft.State() != raft.Leader {
		return nil
	}
	if err := g.waitCtx(ctx, g.raft.LeadershipTransfer()); err != nil {
		return g.mapRaftErr(err)
	}
	return nil
}

// LastIndex is the last index in this node's Raft log.
func (g *ControlGroup) LastIndex() uint64 { return g.raft.LastIndex() }

// AppliedIndex is the last index applied to this node's FSM.
func (g *ControlGroup) AppliedIndex() uint64 { return g.raft.AppliedIndex() }

// EstablishedTerm is the term in which this node established leadership
// (its Barrier succeeded), 0 if it is not an established leader.
func (g *ControlGroup) EstablishedTerm() uint64 { return g.established.Load() }

// CommitIndex is the latest index this node knows to be committed.
func (g *ControlGroup) CommitIndex() uint64 { return g.raft.CommitIndex() }

// Stats returns Raft's diagnostic counters (for status pages).
func (g *ControlGroup) Stats() map[string]string { return g.raft.Stats() }

// Term is this node's current Raft term.
func (g *ControlGroup) Term() uint64 { return g.raft.CurrentTerm() }

// Servers returns the latest Raft configuration known to this node, sorted
// by id.
func (g *ControlGroup) Servers() ([]ServerInfo, error) {
	f := g.raft.GetConfiguration()
	if err := g.wait(f); err != nil {
		return nil, g.mapRaftErr(err)
	}
	cfg := f.Configuration()
	out := make([]ServerInfo, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		out = append(out, ServerInfo{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Voters returns the ids of the voters in the latest configuration, sorted.
func (g *ControlGroup) Voters() []string {
	servers, err := g.Servers()
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range servers {
		if s.Voter {
			out = append(out, s.ID)
		}
	}
	return out
}

// Leadership delivers this node's leadership changes in order: Leader=true
// only after a successful Barrier in that term, Leader=false as soon as
// leadership is lost. Raft's notifications are read by a goroutine that never
// blocks Raft; events wait in an unbounded queue (one per leadership change)
// until read. Close closes the channel, possibly without a final
// Leader=false: a closed channel means "not leader".
func (g *ControlGroup) Leadership() <-chan LeadershipEvent { return g.events.out }

// Barrier waits until every entry committed before the call is applied to
// the local FSM. Leader only (ErrNotLeader otherwise).
func (g *ControlGroup) Barrier(ctx context.Context) error {
	f := g.raft.Barrier(timeoutFrom(ctx))
	if err := g.waitCtx(ctx, f); err != nil {
		return g.mapRaftErr(err)
	}
	return nil
}

// timeoutFrom converts ctx's deadline into a raft timeout (0 = none).
func timeoutFrom(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			return time.Nanosecond
		}
		return d
	}
	return 0
}

func (g *ControlGroup) mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrControlClosed, err)
	}
	return err
}

// Apply commits cmd through Raft and returns its index and the FSM's
// marshalled response. On a follower the command is forwarded over RPC to the
// leader. It retries only where the command certainly was not submitted (no
// leader yet, the peer was not leader, the connection could not be opened);
// ErrLeadershipLost and ErrTimeout mean the outcome is unknown and are
// returned, never retried. An FSM error response comes back as *FSMError.
// Give ctx a deadline: without one, Apply waits for a leader until Close.
func (g *ControlGroup) Apply(ctx context.Context, cmd []byte) (Applied, error) {
	backoff := 5 * time.Millisecond
	var lastErr error
	for {
		select {
		case <-g.closing:
			return Applied{}, ErrControlClosed
		default:
		}
		if err := ctx.Err(); err != nil {
			if lastErr != nil {
				return Applied{}, fmt.Errorf("%w: %w (last: %v)", ErrNoLeader, err, lastErr)
			}
			return Applied{}, fmt.Errorf("%w: %w", ErrNoLeader, err)
		}
		var (
			res Applied
			err error
		)
		if g.raft.State() == raft.Leader {
			res, err = g.applyLocal(ctx, cmd)
		} else if _, addr := g.Leader(); addr != "" && addr != g.addr {
			res, err = g.applyRemote(ctx, addr, cmd)
		} else {
			err = ErrNoLeader
		}
		if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || isDialErr(err)) {
			return res, err
		}
		lastErr = err
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-g.closing:
			t.Stop()
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

func isDialErr(err error) bool {
	var d *errDial
	return errors.As(err, &d)
}

func (g *ControlGroup) applyLocal(ctx context.Context, cmd []byte) (Applied, error) {
	if g.cfg.CheckCommand != nil {
		if err := g.cfg.CheckCommand(cmd); err != nil {
			return Applied{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	f := g.raft.Apply(cmd, timeoutFrom(ctx))
	if err := g.waitCtx(ctx, f); err != nil {
		return Applied{}, g.mapRaftErr(err)
	}
	res := Applied{Index: f.Index()}
	b, err := marshalResponse(f.Response())
	if err != nil {
		var fe *FSMError
		if errors.As(err, &fe) {
			fe.Index = res.Index
		}
		return res, err
	}
	res.Response = b
	return res, nil
}

// marshalResponse turns an FSM response into bytes (see ControlConfig.FSM).
func marshalResponse(resp any) ([]byte, error) {
	switch v := resp.(type) {
	case nil:
		return nil, nil
	case []byte:
		return v, nil
	case error:
		return nil, &FSMError{Err: v}
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("%w: marshal %T: %v", ErrBadResponse, resp, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrBadResponse, resp)
}

func (g *ControlGroup) applyRemote(ctx context.Context, addr string, cmd []byte) (Applied, error) {
	args := wire.ApplyArgs{Cmd: cmd, Timeout: timeoutFrom(ctx)}
	var reply wire.ApplyReply
	cctx, cancel := g.whileLeader(ctx, addr)
	defer cancel()
	err := g.pool.call(cctx, addr, "Control.Apply", &args, &reply)
	switch {
	case err == nil:
	case isDialErr(err):
		return Applied{}, err // never sent: Apply retries (with the new leader)
	case ctx.Err() != nil:
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %w", ErrTimeout, addr, ctx.Err())
	case cctx.Err() != nil:
		// The request may have reached the old leader: outcome unknown.
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %w", ErrLeadershipLost, addr, context.Cause(cctx))
	default:
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %v", ErrLeadershipLost, addr, err)
	}
	return applyResult(reply, addr)
}

// RemoveServer removes id from the Raft configuration (operator action, run
// on the leader; forwarded if needed; retried across leader changes until
// ctx ends). If id is a voter, a caught-up healthy
// non-voter is promoted first; without one, the removal is refused with
// ErrQuorumRisk when it would leave fewer voters than a quorum of MaxVoters.
// The node is not re-added while it keeps its current incarnation.
func (g *ControlGroup) RemoveServer(ctx context.Context, id string) error {
	return g.forwardRemove(ctx, wire.RemoveArgs{ID: id})
}

// forwardRemove runs a removal on the leader, wherever it is. Removal is
// idempotent, so unlike Apply it is retried after an unknown outcome (a
// leadership change mid-way); an "unknown server" after such a retry means
// the first attempt succeeded.
func (g *ControlGroup) forwardRemove(ctx context.Context, args wire.RemoveArgs) error {
	backoff := 5 * time.Millisecond
	uncertain := false
	for {
		var err error
		if g.raft.State() == raft.Leader {
			err = g.removeServer(ctx, args)
		} else if _, addr := g.Leader(); addr != "" && addr != g.addr {
			var reply wire.RemoveReply
			err = g.pool.call(ctx, addr, "Control.Remove", &args, &reply)
			switch {
			case err == nil:
				err = removeErr(reply)
			case !isDialErr(err) && ctx.Err() == nil:
				err = fmt.Errorf("%w: remove via %s: %v", ErrLeadershipLost, addr, err)
			}
		} else {
			err = ErrNoLeader
		}
		if uncertain && errors.Is(err, ErrUnknownServer) {
			return nil
		}
		if (errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrTimeout)) && ctx.Err() == nil {
			uncertain = true
		} else if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || isDialErr(err)) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if uncertain {
				return fmt.Errorf("%w: remove %s: %w (last: %v)", ErrTimeout, args.ID, ctx.Err(), err)
			}
			return fmt.Errorf("%w: remove %s: %w (last: %v)", ErrNoLeader, args.ID, ctx.Err(), err)
		case <-g.closing:
			t.Stop()
			return ErrControlClosed
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// Shutdown leaves the control group gracefully and stops: the node asks the
// leader to remove it from the Raft configuration (promoting a replacement
// first if it is a voter), then closes. Use Close to stop without leaving (a
// restart: the node keeps its place and catches up from its data dir). The
// removal is best effort within ctx; its error is returned after closing.
func (g *ControlGroup) Shutdown(ctx context.Context) error {
	var leaveErr error
	servers, err := g.Servers()
	if err == nil && containsServer(servers, g.cfg.NodeID) {
		voters := 0
		for _, s := range servers {
			if s.Voter {
				voters++
			}
		}
		if voters == 1 && isVoter(servers, g.cfg.NodeID) {
			g.log.Warn("cluster: last voter leaving; the raft configuration keeps it")
		} else {
			leaveErr = g.forwardRemove(ctx, wire.RemoveArgs{ID: g.cfg.NodeID, Incarnation: g.inc.Load(), Leave: true})
		}
	}
	closeErr := g.Close(ctx)
	return errors.Join(leaveErr, closeErr)
}

// Close stops the node without leaving the Raft configuration (a crash or a
// restart, as far as the cluster is concerned). It closes Leadership's
// channel. Safe to call more than once.
func (g *ControlGroup) Close(ctx context.Context) error {
	g.closeOnce.Do(func() {
		close(g.closing)
		if g.sub != nil {
			g.sub.Close()
		}
		f := g.raft.Shutdown()
		// Close the transport before waiting for raft's goroutines: a
		// replication goroutine blocked sending to a peer that is gone
		// would otherwise hold the shutdown until ctx ends.
		g.mux.close()
		if c, ok := g.trans.(raft.WithClose); ok {
			_ = c.Close()
		}
		err := g.waitCtx(ctx, f)
		g.pool.close()
		g.wg.Wait()
		g.events.closeOut()
		g.closeErr = err
	})
	return g.closeErr
}

func containsServer(s []ServerInfo, id string) bool {
	for _, x := range s {
		if x.ID == id {
			return true
		}
	}
	return false
}

func isVoter(s []ServerInfo, id string) bool {
	for _, x := range s {
		if x.ID == id {
			return x.Voter
		}
	}
	return false
}

// notifyLoop reads Raft's NotifyCh promptly, so Raft never blocks on it, and
// leaves the latest value for the leader loop.
func (g *ControlGroup) notifyLoop() {
	for {
		select {
		case v := <-g.notifyCh:
			g.notifyLatest.Store(v)
			signal(g.notifySig)
		case <-g.closing:
			return
		}
	}
}

// leaderLoop establishes leadership (Barrier once per term) and revokes it,
// symmetrically, and runs the reconcile loop while leader.
func (g *ControlGroup) leaderLoop() {
	var (
		term uint64 // established term, 0 if not leader
		stop func() // stops the reconcile loop and waits for it
	)
	revoke := func() {
		if term == 0 {
			return
		}
		stop()
		g.established.Store(0)
		g.events.push(LeadershipEvent{Leader: false, Term: term})
		g.log.Info("cluster: leadership revoked", "term", term)
		term = 0
	}
	defer revoke()
	for {
		select {
		case <-g.notifySig:
		case <-g.closing:
			return
		}
		leader := g.notifyLatest.Load() && g.raft.State() == raft.Leader
		if term != 0 && (!leader || g.raft.CurrentTerm() != term) {
			revoke()
		}
		if !leader || term != 0 {
			continue
		}
		t, ok := g.establish()
		if !ok {
			continue
		}
		term = t
		g.established.Store(term)
		g.events.push(LeadershipEvent{Leader: true, Term: term})
		g.log.Info("cluster: leadership established", "term", term)
		stop = g.startReconcile()
		// A notification that arrived during establish is handled next
		// round (notifySig is still set).
	}
}

// startReconcile runs the reconcile loop until the returned stop is called;
// stop waits for it to end.
func (g *ControlGroup) startReconcile() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		g.reconcileLoop(ctx)
	}()
	return func() {
		cancel()
		<-stopped
	}
}

// establish issues a Barrier in the current term, retrying while still
// leader. It returns the term in which the Barrier succeeded (the term is
// read before the Barrier and checked after it, so a Barrier that straddles
// a leadership change never counts for the newer term).
func (g *ControlGroup) establish() (uint64, bool) {
	for {
		term := g.raft.CurrentTerm()
		err := g.wait(g.raft.Barrier(g.cfg.RPCTimeout))
		if err == nil && g.raft.CurrentTerm() == term && g.raft.State() == raft.Leader {
			return term, true
		}
		if err != nil {
			g.log.Warn("cluster: barrier failed", "err", err)
		}
		if g.raft.State() != raft.Leader {
			return 0, false
		}
		select {
		case <-g.closing:
			return 0, false
		case <-time.After(g.cfg.CommitTimeout):
		}
	}
}

// membershipLoop records graceful leaves and wakes the reconcile and
// bootstrap loops on every batch of membership events.
func (g *ControlGroup) membershipLoop() {
	for {
		select {
		case batch, ok := <-g.sub.C():
			if !ok {
				return
			}
			for _, ev := range batch {
				if ev.Kind == EventLeave {
					g.markLeft(ev.Member.ID, ev.Member.Incarnation)
				}
			}
			signal(g.reconcileSig)
			signal(g.bootstrapSig)
		case <-g.closing:
			return
		}
	}
}

func (g *ControlGroup) markLeft(id string, inc uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.left[id]; !ok || inc > old {
		g.left[id] = inc
	}
}

// leftSnapshot returns a copy of the left set, forgetting ids that came back
// with a higher incarnation.
func (g *ControlGroup) leftSnapshot(members []Member) map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range members {
		if inc, ok := g.left[m.ID]; ok && m.State == StateAlive && m.Incarnation > inc {
			delete(g.left, m.ID)
		}
	}
	out := make(map[string]uint64, len(g.left))
	for k, v := range g.left {
		out[k] = v
	}
	return out
}

// pruneLeft forgets left ids that are neither in the configuration nor in
// gossip any more (reaped): nothing can re-add them by mistake.
func (g *ControlGroup) pruneLeft(servers []ServerInfo, members []Member) {
	known := map[string]bool{}
	for _, s := range servers {
		known[s.ID] = true
	}
	for _, m := range members {
		known[m.ID] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.left {
		if !known[id] {
			delete(g.left, id)
		}
	}
}

// eventQueue delivers leadership events in order without ever blocking the
// producer.
type eventQueue struct {
	mu    sync.Mutex
	queue []LeadershipEvent
	sig   chan struct{}
	out   chan LeadershipEvent
}

func newEventQueue() *eventQueue {
	return &eventQueue{sig: make(chan struct{}, 1), out: make(chan LeadershipEvent)}
}

func (q *eventQueue) push(ev LeadershipEvent) {
	q.mu.Lock()
	q.queue = append(q.queue, ev)
	q.mu.Unlock()
	signal(q.sig)
}

func (q *eventQueue) run(closing <-chan struct{}) func() {
	return func() {
		for {
			q.mu.Lock()
			var ev LeadershipEvent
			has := len(q.queue) > 0
			if has {
				ev = q.queue[0]
			}
			q.mu.Unlock()
			if !has {
				select {
				case <-q.sig:
					continue
				case <-closing:
					return
				}
			}
			select {
			case q.out <- ev:
				q.mu.Lock()
				q.queue = q.queue[1:]
				q.mu.Unlock()
			case <-closing:
				return
			}
		}
	}
}

func (q *eventQueue) closeOut() { close(q.out) }
