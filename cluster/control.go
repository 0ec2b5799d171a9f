package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	netrpc "net/rpc"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/gossip"
	"github.com/tenurehq/tenure/cluster/identity"
	"github.com/tenurehq/tenure/cluster/internal/logadapt"
	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
	"github.com/tenurehq/tenure/cluster/raftnet"
	"github.com/tenurehq/tenure/cluster/rpc"
)

// Errors returned by the control group. Match them with errors.Is.
var (
	// ErrNoLeader: no Raft leader was known before the context ended. The
	// command was not submitted.
	ErrNoLeader = errors.New("cluster: no raft leader")
	// errNobodyLeft: a graceful leave gave up because no leader was
	// reachable for several election timeouts (Shutdown: the whole
	// cluster is stopping).
	errNobodyLeft = errors.New("cluster: nobody left to hear the leave")
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
	// ErrControlClosed: the control group is shut down (rpc.ErrClosed: its
	// RPC pool returns it too).
	ErrControlClosed = rpc.ErrClosed
	// ErrBadResponse: the FSM returned a response that cannot cross the RPC.
	ErrBadResponse = errors.New("cluster: unsupported fsm response type")
	// ErrQuorumRisk: a removal would leave fewer voters than a quorum of the
	// configured voter count.
	ErrQuorumRisk = errors.New("cluster: removal would leave fewer voters than a quorum")
	// ErrUnknownServer: the id is not in the Raft configuration.
	ErrUnknownServer = errors.New("cluster: server not in raft configuration")
	// ErrBadControlConfig: ControlConfig.Validate failed.
	ErrBadControlConfig = errors.New("cluster: invalid control config")
	// ErrBadIdentity: a node id or identity file is invalid
	// (identity.ErrBadIdentity).
	ErrBadIdentity = identity.ErrBadIdentity
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
	C() <-chan []gossip.Event
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
	// raftP is this node's Raft instance; nil on a member that follows
	// the stream (raftless.go). raftMu orders its start and stop;
	// raftStop ends the running instance's leader watch.
	raftP    atomic.Pointer[raft.Raft]
	raftMu   sync.Mutex
	raftStop chan struct{}
	// raftStarting: raftOnDemand's start is under way. raftStartedAt is
	// when the running instance started (under raftMu).
	raftStarting  atomic.Bool
	raftStartedAt time.Time
	// refuserStop and refuserDone run startRefuser's loop (under raftMu).
	refuserStop, refuserDone chan struct{}
	hlog                     hclog.Logger
	trans                    raft.Transport
	waitT                    *raftnet.WaitingTransport // under g.trans: replication waits for unreachable peers
	mux                      *rpc.Mux
	pool                     *rpcPool
	addr                     string
	// revocation checks proven peers against ControlConfig.Revoked
	// (identity/revoke.go); nil without it.
	revocation *identity.Revocation
	// proofs: node ids proven at Raft addresses (proof.go).
	proofs *proofLog

	notifyCh     chan bool
	notifyLatest atomic.Bool
	notifySig    chan struct{}
	reconcileSig chan struct{}
	bootstrapSig chan struct{}
	pushSig      chan struct{} // PushCommit (control_push.go)
	pushEntrySig chan struct{} // a follower missed a commit push: push an entry
	pushTrans    raft.Transport
	pushing      sync.Map // follower id → *atomic.Bool: a commit push to it is in flight

	established  atomic.Uint64 // term of established leadership, 0 if none
	confirms     *confirmLog   // lastConfirm per term (control_confirm.go)
	confirmBatch confirmBatcher
	inc          atomic.Uint64     // process incarnation (cfg.Incarnation, SetIncarnation)
	leaderSeen   atomic.Bool       // Apply has seen Raft name a leader (applyViaVoters)
	vouchReq     chan vouchRequest // the Raft guard's unknown leaders (raftvouch.go)

	mu   sync.Mutex
	left map[string]uint64 // id → incarnation that left (or was removed)

	events *eventQueue

	// leaderChange is closed (and replaced) whenever Raft observes a
	// leader change; forwarded commands watch it (see applyRemote).
	leaderMu     sync.Mutex
	leaderChange chan struct{}

	// The committed-state stream (stream.go): rec wraps the FSM; follow
	// is a member's subscriber (nil on voter-capable nodes).
	rec         *streamFSM
	follow      *streamFollower
	streamStats streamServerStats

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
	cfg.defaults()
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
		pushSig:      make(chan struct{}, 1),
		pushEntrySig: make(chan struct{}, 1),
		left:         map[string]uint64{},
		events:       newEventQueue(),
		closing:      make(chan struct{}),
		confirms:     newConfirmLog(time.Now()),
		vouchReq:     make(chan vouchRequest, 1),
		proofs:       newProofLog(),
	}
	g.inc.Store(cfg.Incarnation)
	if cfg.Authenticate != nil && cfg.Revoked != nil {
		every := rpc.LogLimiter{Every: time.Second}
		g.revocation = &identity.Revocation{Revoked: cfg.Revoked, Log: func(c net.Conn, err error) {
			if every.Allow() {
				log.Warn("cluster: refused a revoked peer (further refusals within 1s not logged)", "remote", c.RemoteAddr().String(), "err", err)
			}
		}}
	}

	stream := cfg.StreamLayer
	if stream == nil {
		s, err := NewTCPStreamLayer(cfg.BindAddr, cfg.AdvertiseAddr)
		if err != nil {
			return nil, err
		}
		stream = s
	}
	if cfg.Authenticate != nil {
		stream = rpc.NewCheckedDialer(stream, g.checkDialed, g.revocation)
	}
	if err := netrpc.NewServer().RegisterName("Control", &controlRPC{g: g}); err != nil {
		_ = stream.Close()
		return nil, fmt.Errorf("cluster: register rpc: %w", err)
	}
	g.mux = rpc.NewMux(stream, rpc.MuxOptions{
		Server: func(p Peer, authenticated bool) *netrpc.Server {
			// One server per connection, so each call knows its peer.
			srv := netrpc.NewServer()
			_ = srv.RegisterName("Control", &controlRPC{g: g, peer: p, authenticated: authenticated})
			return srv
		},
		Authenticate: cfg.Authenticate,
		Revocation:   g.revocation,
		Raft: identity.RaftView{
			Configuration: func() raft.Configuration {
				c, _ := g.latestConfiguration()
				return c
			},
			Term: g.currentTerm,
			Leader: func() string {
				_, id := g.leaderWithID()
				return string(id)
			},
			Self:          cfg.NodeID,
			UnknownLeader: g.requestVouch,
		},
		RaftRunning: g.raftOnDemand,
		MaxMessage:  cfg.MaxRPCMessage,
		IdleTimeout: cfg.RPCIdleTimeout,
		MsgTimeout:  cfg.RPCMessageTimeout,
		MaxSnapshot: cfg.MaxInstallSnapshot,
	}, cfg.Transport == nil, log)
	g.pool = newRPCPool(stream, cfg.MaxRPCMessage)
	g.addr = stream.Addr().String()

	g.hlog = logadapt.NewRaftLogger(log) // raft and its transport log as slog records
	g.trans = cfg.Transport
	if g.trans == nil {
		g.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  g.mux.Raft(),
			MaxPool: 3,
			Timeout: cfg.RPCTimeout,
			Logger:  g.hlog,
		})
	}
	// Log replication to an unreachable peer waits for it (raftnet/wait.go), so
	// a voter back from an outage is not left to raft's growing backoff.
	wt := raftnet.NewWaitingTransport(g.trans, log, raftnet.WaitProbe, raftnet.WaitMax)
	g.pushTrans = g.trans // commit pushes never wait (control_push.go)
	g.trans, g.waitT = wt.RaftTransport(), wt

	hasState, err := raft.HasExistingState(cfg.LogStore, cfg.StableStore, cfg.SnapshotStore)
	if err != nil {
		g.mux.Close()
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if cfg.AppliedIndex != nil {
		ring := cfg.StreamBuffer
		if cfg.Voter == VoterNever {
			ring = 0 // a member serves nobody
		}
		g.rec = newStreamFSM(cfg.FSM, cfg.AppliedIndex, ring, cfg.StreamBufferBytes)
		g.rec.snaps = cfg.SnapshotStore
	}
	g.leaderChange = make(chan struct{})
	// A member (VoterNever with the stream) starts without Raft
	// (raftless.go); every other node starts it now.
	if !cfg.lazyRaft() {
		if err := g.startRaft(); err != nil {
			g.mux.Close()
			if c, ok := g.trans.(raft.WithClose); ok {
				_ = c.Close()
			}
			return nil, err
		}
	}
	if g.rec != nil && cfg.StreamActive != nil {
		g.follow = newStreamFollower(g, stream) // started below, once the RPC server runs
	}
	wt.SetWanted(func(id raft.ServerID, addr raft.ServerAddress, term uint64) bool {
		r := g.rft()
		if r == nil || r.State() != raft.Leader || r.CurrentTerm() != term {
			return false
		}
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if s.ID == id {
				return s.Address == addr
			}
		}
		return false
	})
	g.mux.Start()
	if g.follow != nil {
		g.goLoop(g.follow.run)
	}

	if peers != nil {
		g.sub = peers.Subscribe(64)
	}
	g.goLoop(g.notifyLoop)
	g.goLoop(g.leaderLoop)
	g.goLoop(g.pushLoop)
	g.goLoop(g.events.run(g.closing))
	if cfg.Authenticate != nil {
		g.goLoop(g.vouchLoop)
	}
	if g.sub != nil {
		g.goLoop(g.membershipLoop)
	}
	if !hasState && cfg.BootstrapExpect > 0 && peers != nil && g.HasRaft() {
		g.goLoop(g.bootstrapLoop)
	}
	log.Info("cluster: control group started", "addr", g.addr, "existing_state", hasState, "raft", g.HasRaft())
	return g, nil
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
func (g *ControlGroup) IsLeader() bool { return g.isRaftLeader() }

// Leader returns the current leader's id and address, "" if none is known.
func (g *ControlGroup) Leader() (id, addr string) {
	a, i := g.leaderWithID()
	if g.follow != nil && (i == "" || g.needStream()) {
		// A node out of Raft learns the leader from the stream.
		if id, addr, ok := g.follow.streamLeader(); ok {
			return id, addr
		}
	}
	return string(i), string(a)
}

// TransferLeadership hands leadership to the most up-to-date voter when
// this node leads, and waits (within ctx) until another node leads: a
// planned stop of the leader then costs a hand-over instead of an
// election timeout. It returns nil when this node is not the leader.
func (g *ControlGroup) TransferLeadership(ctx context.Context) error {
	r := g.rft()
	if r == nil || r.State() != raft.Leader {
		return nil
	}
	if err := g.waitCtx(ctx, r.LeadershipTransfer()); err != nil {
		return g.mapRaftErr(err)
	}
	return nil
}

// LastIndex is the last index in this node's Raft log (a member without
// Raft: its stream index).
func (g *ControlGroup) LastIndex() uint64 { return g.raftLastIndex() }

// AppliedIndex is the last index applied to this node's FSM.
func (g *ControlGroup) AppliedIndex() uint64 { return g.appliedIndex() }

// EstablishedTerm is the term in which this node established leadership
// (its Barrier succeeded), 0 if it is not an established leader.
func (g *ControlGroup) EstablishedTerm() uint64 { return g.established.Load() }

// CommitIndex is the latest index this node knows to be committed.
func (g *ControlGroup) CommitIndex() uint64 { return g.commitIndex() }

// Stats returns Raft's diagnostic counters (for status pages).
func (g *ControlGroup) Stats() map[string]string {
	if r := g.rft(); r != nil {
		return r.Stats()
	}
	return map[string]string{"state": "Stream", "applied_index": fmt.Sprint(g.streamIndex())}
}

// Term is this node's current Raft term.
func (g *ControlGroup) Term() uint64 { return g.currentTerm() }

// Servers returns the latest Raft configuration known to this node, sorted
// by id (a member without Raft: the voters the stream named last).
func (g *ControlGroup) Servers() ([]ServerInfo, error) {
	r := g.rft()
	if r == nil {
		if g.follow == nil {
			return nil, errNoRaft
		}
		return g.follow.streamVoters(), nil
	}
	f := r.GetConfiguration()
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

// Voters returns the ids of the voters in the latest configuration, sorted
// (on a member that follows the stream: the voters the stream named last).
func (g *ControlGroup) Voters() []string {
	if g.follow != nil && g.needStream() {
		if vs := g.follow.streamVoters(); len(vs) > 0 {
			out := make([]string, len(vs))
			for i, v := range vs {
				out[i] = v.ID
			}
			return out
		}
	}
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

// Shutdown leaves the control group gracefully and stops: the node asks the
// leader to remove it from the Raft configuration (promoting a replacement
// first if it is a voter), then closes. Use Close to stop without leaving (a
// restart: the node keeps its place and catches up from its data dir). The
// removal is best effort within ctx, and given up once no leader has been
// reachable for 3·ElectionTimeout: the whole cluster is stopping (voters
// first), nobody is left to remove the node, and it closes without an
// error — the configuration entry is removed by the next leader's
// reconciliation, as any dead server's is after DeadVoterTimeout. Any
// other removal error is returned after closing.
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
			// Without a leader for a few election timeouts the cluster
			// is stopping too: nobody can remove us, so stop anyway.
			leaveErr = g.forwardRemove(ctx, wire.RemoveArgs{ID: g.cfg.NodeID, Incarnation: g.inc.Load(), Leave: true}, 3*g.cfg.ElectionTimeout)
			if errors.Is(leaveErr, errNobodyLeft) {
				g.log.Info("cluster: no control-group leader left to hear the leave; stopping without it", "err", leaveErr)
				leaveErr = nil
			}
		}
	}
	closeErr := g.Close(ctx)
	return errors.Join(leaveErr, closeErr)
}

// isClosing reports whether Close has begun: RPC handlers and proposers
// refuse new work from then on.
func (g *ControlGroup) isClosing() bool {
	select {
	case <-g.closing:
		return true
	default:
		return false
	}
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
		g.raftMu.Lock() // no start or drop from here on (closing is closed)
		r := g.rft()
		g.raftMu.Unlock()
		var f raft.Future
		if r != nil {
			f = r.Shutdown()
		}
		// Close the transport before waiting for raft's goroutines: a
		// replication goroutine blocked sending to a peer that is gone
		// would otherwise hold the shutdown until ctx ends.
		g.mux.Close()
		if c, ok := g.trans.(raft.WithClose); ok {
			_ = c.Close()
		}
		var err error
		if f != nil {
			err = g.waitCtx(ctx, f)
		}
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
