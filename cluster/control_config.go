package cluster

// ControlConfig: the control group's settings, its named profiles and
// Validate.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/rpc"
)

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
	// BootstrapGate, if set, holds every bootstrap attempt until it is
	// closed: the node closes it once its first join of its seeds has
	// ended (answered or failed), so the attempt sees an existing cluster
	// in gossip and its probes find that cluster's Raft state instead of
	// a node alone forming a second control group (BootstrapExpect 1
	// with seeds). nil attempts at once.
	BootstrapGate <-chan struct{}
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
	// with ErrUnauthorized. It runs after the leader's FSM (AppliedIndex,
	// when set; Raft's applied index otherwise) has applied everything
	// committed when the request arrived; a leader that has not within
	// the request's timeout refuses the command without calling it
	// (ErrTimeout, nothing proposed). nil allows every command.
	Authorize func(p Peer, cmd []byte) error
	// Revoked, with Authenticate, says whether a proven peer is on the
	// committed deny-list (an error wrapping ErrPeerRevoked): it is
	// called at every handshake, accepted and dialed, and at every later
	// read and write of such a connection (identity/revoke.go), so it must be
	// cheap and must not block. nil revokes nobody.
	Revoked func(p Peer) error
	// CheckCommand, if set, checks every command before this node proposes it
	// as leader (local or forwarded, authenticated or not); an error
	// refuses it with ErrBadRequest. A replica that cannot read a committed
	// entry must stop applying (every replica must apply the same log), so
	// bytes that do not decode must never reach the log.
	CheckCommand func(cmd []byte) error
	// Renew, if set, offers Control.Renew (lease renewals off the log,
	// ControlGroup.Renew): the leader calls it for each renewal it
	// receives, with now read after receipt, and acknowledges an accepted
	// renewal only after a confirm round (ConfirmLeadership). The record it
	// returns travels back as is, with a refusal too. It may refuse (an
	// error) to say renewals are not active now. Calls may be concurrent.
	Renew func(now time.Time, req RenewRequest) (record []byte, err error)
	// RenewReady, if set, returns a channel that is closed when the
	// leader next establishes a term (or already is). Renew returning
	// ErrRenewNotReady (the leader has not established its term yet) then
	// holds the renewal until that channel closes, the leader changes or
	// the renewal's deadline passes, and judges it again with a new now:
	// a renewal sent during a leader's establishment counts from that
	// moment instead of being refused and asked again a renewal period
	// later. nil: ErrRenewNotReady is answered at once, as ErrNotLeader.
	RenewReady func() <-chan struct{}
	// Words, if set, offers Control.Words (cluster version 6, the handoff
	// on the old owner's word; ControlGroup.Words): the leader calls it for
	// each node's ask for the words relayed to it, which it may hold until
	// ctx ends; the bytes travel back as they are. Calls may be
	// concurrent.
	Words func(ctx context.Context, node string) ([]byte, error)
	// NoWords, if set, is what Words returns when it relays nothing: such
	// an answer goes back without the confirm round (there is no bound to
	// protect), which is most of an idle member's long poll.
	NoWords []byte
	// OwnerWord, if set, offers Control.OwnerWord (cluster version 6, the
	// handoff on the old owner's word; ControlGroup.SendOwnerWord): the
	// leader calls it with each old owner's word it receives — cmd is
	// what the sender passed, its Transfers — and the peer proven by
	// Authenticate (authenticated false: nothing is proven, an insecure
	// cluster). It is called once the replica has applied the commit
	// index read when the word arrived, so it may judge the word against
	// the replica; a replica that has not applied it within RPCTimeout
	// refuses the word without calling it (the sender's SendOwnerWord
	// returns ErrTimeout). It must not block. Forwarded commands (Control.Apply) are
	// not shown to it: the word travels on its own, ahead of the commit
	// (and the leader decodes a forwarded command once less).
	OwnerWord func(p Peer, authenticated bool, cmd []byte)
	// RenewRefusals names the errors Renew may return that the renewing
	// node must tell apart (stale incarnation, expiring, ...): such an
	// error crosses the wire by its name and comes back from
	// ControlGroup.Renew as the same sentinel. Every node must use the same
	// names.
	RenewRefusals map[string]error
	// MaxRPCMessage bounds one RPC message in bytes (rpc.DefaultMaxRPCMessage
	// if 0); RPCIdleTimeout and RPCMessageTimeout bound the time between
	// requests and within one (defaults if 0).
	MaxRPCMessage     int
	RPCIdleTimeout    time.Duration
	RPCMessageTimeout time.Duration
	// MaxInstallSnapshot bounds the bytes of one InstallSnapshot a peer
	// streams to this node over an authenticated Raft connection
	// (DefaultMaxInstallSnapshot if 0): a larger one is refused before one
	// byte of it is read and counted in
	// tenure_cluster_raft_refused_total{reason="snapshot_too_large"}. Set it to
	// the largest snapshot the FSM restores.
	MaxInstallSnapshot int64

	// Transport, if set, carries Raft instead of the StreamLayer (which then
	// carries only RPC): RaftMemNetwork.Transport in tests and simulation.
	// It requires a StreamLayer whose address equals its LocalAddr.
	Transport raft.Transport

	// PushCommand is the command PushCommit appends: one the FSM applies
	// as a no-op (it must see it, so that a replica's applied index
	// reaches the log's last index). nil disables PushCommit.
	PushCommand []byte

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

	// The committed-state stream (stream.go, cluster version 5).
	//
	// AppliedIndex returns the FSM's applied index: the log index of the
	// last entry it applied, or the one its restored snapshot had applied.
	// nil disables the stream on this node (neither served nor followed).
	// The leader also waits on it before it judges a forwarded command
	// (Authorize) or a told word (OwnerWord) against its replica (without
	// it, on Raft's applied index, which runs ahead of the FSM).
	AppliedIndex func() uint64
	// StreamActive reports whether members follow the stream now (the
	// cluster's active version has it). While it holds, the leader keeps
	// VoterNever nodes out of the Raft configuration and servers answer
	// Subscribe; a VoterNever node with AppliedIndex and StreamActive set
	// subscribes (and keeps trying while servers refuse). nil = never.
	StreamActive func() bool
	// StreamPending reports whether the cluster has recorded no version
	// yet (a fresh cluster before its first registration): a voter then
	// refuses the stream saying so, and a member keeps asking instead of
	// starting Raft (stream.go, belowStream). nil = never.
	StreamPending func() bool
	// StreamBuffer and StreamBufferBytes bound the applied entries a
	// server keeps for subscribers that resume (DefaultStreamBuffer,
	// DefaultStreamBufferBytes if 0); older ones get a snapshot.
	StreamBuffer      int
	StreamBufferBytes int
	// StreamMaxSubscribers bounds the Subscribe calls a server holds at
	// once (DefaultStreamMaxSubscribers if 0).
	StreamMaxSubscribers int
	// StreamWait is how long a server holds a Subscribe call with nothing
	// new (DefaultStreamWait if 0); StreamBatchBytes bounds one reply's
	// entry data and StreamMaxSnapshot a snapshot (defaults if 0).
	StreamWait        time.Duration
	StreamBatchBytes  int
	StreamMaxSnapshot int
	// StreamStandbys is how many voter-capable nodes stay Raft non-voters
	// once members follow the stream, so that a lost voter is replaced at
	// once (DefaultStreamStandbys if 0, none if negative); every other
	// non-voter follows the stream.
	StreamStandbys int

	// Logger receives the control group's and Raft's logs; nil = discard.
	Logger *slog.Logger
}

// streamActive reports whether members follow the stream now (the
// cluster's version has them on it): the leader keeps them out of the
// Raft configuration (reconcileState.Stream).
func (c *ControlConfig) streamActive() bool {
	return c.AppliedIndex != nil && c.StreamActive != nil && c.StreamActive()
}

// streamPending reports whether this node's cluster has recorded no
// version yet (StreamPending) while it could serve the stream: a fresh
// cluster, which records the newest version its first nodes speak moments
// later, while its members wait for the stream without Raft
// (streamPendingMsg). The leader adds no such member to the configuration
// then (reconcileState.StreamPending): it added every member of a forming
// cluster as a non-voter whose Raft port refused the leader, and took it
// out again — 2·N configuration changes and N failing replication streams
// while the cluster formed (docs/benchmarks.md, fifth round). Liveness
// only: who is a non-voter changes no committed state.
func (c *ControlConfig) streamPending() bool {
	return c.AppliedIndex != nil && c.StreamActive != nil && c.StreamPending != nil && c.StreamPending()
}

// standbys is StreamStandbys with its default applied.
func (c *ControlConfig) standbys() int {
	switch {
	case c.StreamStandbys == 0:
		return DefaultStreamStandbys
	case c.StreamStandbys < 0:
		return 0
	}
	return c.StreamStandbys
}

// defaults fills the fields NewControlGroup defaults when left 0: the RPC
// limits, the InstallSnapshot bound and the stream's settings.
func (c *ControlConfig) defaults() {
	orDefault(&c.MaxRPCMessage, rpc.DefaultMaxRPCMessage)
	orDefault(&c.RPCIdleTimeout, rpc.DefaultRPCIdleTimeout)
	orDefault(&c.RPCMessageTimeout, rpc.DefaultRPCMessageTimeout)
	orDefault(&c.MaxInstallSnapshot, DefaultMaxInstallSnapshot)
	orDefault(&c.StreamBuffer, DefaultStreamBuffer)
	orDefault(&c.StreamBufferBytes, DefaultStreamBufferBytes)
	orDefault(&c.StreamMaxSubscribers, DefaultStreamMaxSubscribers)
	orDefault(&c.StreamWait, DefaultStreamWait)
	orDefault(&c.StreamBatchBytes, DefaultStreamBatchBytes)
	orDefault(&c.StreamMaxSnapshot, DefaultStreamMaxSnapshot)
}

// orDefault sets *v to def when *v is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// DefaultControlConfig is for LAN deployments: half of Raft's default
// timeouts (a dead leader is detected and replaced well inside the default
// profile's 1.5 s node lease), 3 voters, dead voters replaced after 30
// minutes. LeaderLeaseTimeout equals HeartbeatTimeout (500 ms; it was
// 250 ms): a leader steps down when it has not heard from a quorum for
// as long as a follower waits before it starts an election, not half of
// it — on a machine starved of CPU the shorter one deposed healthy
// leaders every few seconds (docs/benchmarks.md, "fifth round"). Liveness
// only: no safety argument rests on Raft's leader lease (renewal acks and
// consistent reads ride on confirm rounds, commands on the log;
// docs/control-group.md), and a dead leader is still replaced after the
// followers' heartbeat timeout.
func DefaultControlConfig() ControlConfig {
	return ControlConfig{
		BootstrapExpect:    3,
		MaxVoters:          3,
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
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
// under load. hashicorp/raft's follower starts an election 1–3 heartbeat
// timeouts after its last contact with the leader, so a dead leader is
// replaced 0.2–0.6 s after it died, inside the fast profile's 800 ms node
// lease (with 300 ms, up to 0.9 s: nodes lost their leases during the
// election; docs/benchmarks.md).
func FastControlConfig() ControlConfig {
	c := DefaultControlConfig()
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
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
	if c.MaxInstallSnapshot < 0 {
		return bad("MaxInstallSnapshot %d (≥ 0)", c.MaxInstallSnapshot)
	}
	if c.StreamBuffer < 0 || c.StreamBufferBytes < 0 || c.StreamMaxSubscribers < 0 || c.StreamWait < 0 || c.StreamWait > maxStreamWait ||
		c.StreamBatchBytes < 0 || c.StreamMaxSnapshot < 0 {
		return bad("StreamBuffer %d, StreamBufferBytes %d, StreamMaxSubscribers %d, StreamBatchBytes %d, StreamMaxSnapshot %d (≥ 0) and StreamWait %v (0..%v)",
			c.StreamBuffer, c.StreamBufferBytes, c.StreamMaxSubscribers, c.StreamBatchBytes, c.StreamMaxSnapshot, c.StreamWait, maxStreamWait)
	}
	if c.DeadVoterTimeout < 0 || (c.DeadVoterTimeout > 0 && c.DeadVoterTimeout < 2*c.ElectionTimeout) {
		return bad("DeadVoterTimeout = %v, want 0 (off) or ≥ 2×ElectionTimeout (%v)", c.DeadVoterTimeout, 2*c.ElectionTimeout)
	}
	return nil
}
