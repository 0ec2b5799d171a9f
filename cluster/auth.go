package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// The trust boundary of the Raft/RPC port (docs/security.md). With
// ControlConfig.Authenticate set, every accepted connection must prove who
// is on the other end (mutual TLS: the node id in the peer's certificate)
// before one byte of Raft or RPC is read from it; then
//
//   - only a node (voter-capable) certificate may open a Raft stream: a
//     member's or an operator's is refused on the first Raft byte, and a
//     Raft dial accepts only a server with a node certificate (rpc.go);
//   - every Raft message must carry the proven id in its header (a node
//     cannot speak for another), votes and log come only from voters of
//     the latest configuration, log only from the leader of its term,
//     TimeoutNow only from the leader this node follows, and every
//     configuration carried must decode (see raftguard.go);
//   - every forwarded command is checked by ControlConfig.Authorize against
//     the proven id before it reaches Raft, and Remove of another server
//     needs an operator;
//   - every RPC message is bounded in size (MaxRPCMessage) and in time
//     (RPCIdleTimeout between requests, RPCMessageTimeout within one).
//
// Without Authenticate (loopback clusters, tests, Insecure) every peer is
// trusted as before and no command is authorized.

// Role is what a peer's certificate proves it may be (docs/security.md,
// "Roles"). The role checks apply only where ControlConfig.Authenticate is
// set; without it (loopback, Insecure, tests) every peer is trusted and
// Peer is the zero value.
type Role uint8

// The roles.
const (
	// RoleNone: no role proven (the zero value). With authentication on,
	// such a peer passes no role check: it may not speak Raft nor confirm
	// leadership (fail closed, for an Authenticate that names no role).
	RoleNone Role = iota
	// RoleNode: a voter-capable node certificate (tenure://node/<id>). The
	// only role the Raft port accepts.
	RoleNode
	// RoleMember: a member certificate (tenure://member/<id>): a
	// --voter=never node proven by its id. The RPC path only: renewals,
	// proposals (checked by ControlConfig.Authorize), the committed-state
	// stream. Never Raft.
	RoleMember
	// RoleOperator: an operator certificate; ID is the operator's name.
	// Operator actions over RPC (remove another server); never Raft.
	RoleOperator
)

// String names the role as docs/security.md does.
func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleNode:
		return "node"
	case RoleMember:
		return "member"
	case RoleOperator:
		return "operator"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Peer is who is on the other end of a connection, as the stream layer
// proved it.
type Peer struct {
	// ID is the peer's node id (or operator name for RoleOperator).
	ID string
	// Role is what its certificate proves.
	Role Role
	// Serial is the serial number of the peer's certificate
	// (ledger.NormalizeSerial form), checked against the deny-list.
	Serial string
}

// IsOperator reports whether the peer holds an operator certificate: it may
// run operator actions but is not a node.
func (p Peer) IsOperator() bool { return p.Role == RoleOperator }

// VoterCapable reports whether the peer proved a node (voter-capable)
// certificate: the only role that may speak Raft to an authenticating port.
func (p Peer) VoterCapable() bool { return p.Role == RoleNode }

func (p Peer) String() string {
	switch p.Role {
	case RoleOperator:
		return "operator " + p.ID
	case RoleMember:
		return "member " + p.ID
	case RoleNone:
		return "peer " + p.ID
	}
	return "node " + p.ID
}

// Defaults of the RPC limits.
const (
	// DefaultMaxRPCMessage bounds one RPC message (request or reply). A
	// forwarded command is at most a batch of commit.DefaultBatchMaxBytes
	// (1 MiB); the headroom is for a reply that carries job records.
	DefaultMaxRPCMessage = 8 << 20
	// DefaultRPCIdleTimeout closes an RPC connection on which no request
	// started for this long (pooled connections are redialled).
	DefaultRPCIdleTimeout = 10 * time.Minute
	// DefaultRPCMessageTimeout bounds reading one message once its first
	// byte arrived: a peer that trickles bytes is cut off.
	DefaultRPCMessageTimeout = 30 * time.Second
	// authTimeout bounds a TLS handshake on an accepted connection.
	authTimeout = 10 * time.Second
)

// ErrMessageTooLarge: an RPC or Raft message over its size limit. The
// connection is closed.
var ErrMessageTooLarge = errors.New("cluster: message too large")

// TLSAuthenticator returns a ControlConfig.Authenticate for a StreamLayer
// made with NewTLSStreamLayer: it completes the handshake (which verifies
// the peer's certificate chain with the server config) and hands the
// verified connection state to peerOf, which names the peer from its
// certificate.
func TLSAuthenticator(peerOf func(tls.ConnectionState) (Peer, error)) func(context.Context, net.Conn) (Peer, error) {
	return func(ctx context.Context, c net.Conn) (Peer, error) {
		tc, ok := c.(*tls.Conn)
		if !ok {
			return Peer{}, fmt.Errorf("cluster: connection from %s is not TLS", c.RemoteAddr())
		}
		if err := tc.HandshakeContext(ctx); err != nil {
			return Peer{}, fmt.Errorf("cluster: TLS handshake with %s: %w", c.RemoteAddr(), err)
		}
		p, err := peerOf(tc.ConnectionState())
		if err != nil {
			return Peer{}, fmt.Errorf("cluster: peer %s: %w", c.RemoteAddr(), err)
		}
		return p, nil
	}
}

// gobLimitConn bounds every gob message read from a connection and the time
// it may take: gob frames each message with its length (an unsigned gob
// integer), so the reader checks that length before gob allocates for it.
// The bytes pass through unchanged: the wire format is plain net/rpc gob.
type gobLimitConn struct {
	net.Conn
	max        int
	idle, msg  time.Duration
	remaining  int
	hdr        [9]byte
	hdrPending []byte // header bytes read but not yet returned
}

func newGobLimitConn(c net.Conn, max int, idle, msg time.Duration) *gobLimitConn {
	return &gobLimitConn{Conn: c, max: max, idle: idle, msg: msg}
}

func (c *gobLimitConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.hdrPending) > 0 {
		n := copy(p, c.hdrPending)
		c.hdrPending = c.hdrPending[n:]
		return n, nil
	}
	if c.remaining == 0 {
		if err := c.readHeader(); err != nil {
			return 0, err
		}
		n := copy(p, c.hdrPending)
		c.hdrPending = c.hdrPending[n:]
		return n, nil
	}
	if len(p) > c.remaining {
		p = p[:c.remaining]
	}
	n, err := c.Conn.Read(p)
	c.remaining -= n
	return n, err
}

// readHeader reads the next message's length prefix: one byte < 0x80 is the
// length itself; otherwise the byte is the negated count of big-endian
// length bytes that follow.
func (c *gobLimitConn) readHeader() error {
	if c.idle > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	if _, err := io.ReadFull(c.Conn, c.hdr[:1]); err != nil {
		return err
	}
	if c.msg > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.msg))
	}
	b := c.hdr[0]
	n := 1
	var length uint64
	if b < 0x80 {
		length = uint64(b)
	} else {
		k := int(-int8(b))
		if k < 1 || k > 8 {
			return fmt.Errorf("%w: bad gob length prefix %#x", ErrMessageTooLarge, b)
		}
		if _, err := io.ReadFull(c.Conn, c.hdr[1:1+k]); err != nil {
			return err
		}
		for _, x := range c.hdr[1 : 1+k] {
			length = length<<8 | uint64(x)
		}
		n += k
	}
	if length > uint64(c.max) {
		return fmt.Errorf("%w: %d-byte message from %s, limit %d", ErrMessageTooLarge, length, c.Conn.RemoteAddr(), c.max)
	}
	c.remaining = int(length)
	c.hdrPending = c.hdr[:n]
	return nil
}

// logLimiter lets one log line through per interval: refused connections
// from a scanner or an attacker must not flood the log.
type logLimiter struct {
	every time.Duration
	last  atomic.Int64
}

func (l *logLimiter) allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(l.every) && l.last.CompareAndSwap(last, now)
}

// checkedDialer verifies, on every connection this node dials, that the
// server is the node gossip says listens at that address: a member's
// certificate cannot stand in for another member's Raft address.
type checkedDialer struct {
	StreamLayer
	check   func(ctx context.Context, addr string, c net.Conn) (Peer, error)
	revoked *revocation // the deny-list (revoke.go)
}

func (d *checkedDialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := d.StreamLayer.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	p, err := d.check(ctx, addr, c)
	if err == nil {
		err = d.revoked.check(c, p)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &provenConn{Conn: d.revoked.wrap(c, p), peer: p}, nil
}

// provenConn is a dialed connection whose server proved who it is.
type provenConn struct {
	net.Conn
	peer Peer
}

// RaftRefused is how many Raft connections or messages this node refused
// since it started: a certificate that is not a node's on the first Raft
// byte, or a message the Raft guard refused (raftguard.go). The same count
// goes to go-metrics as cluster.raft.refused{reason} (Prometheus:
// tenure_cluster_raft_refused_total through httpapi.BridgeGoMetrics).
func (g *ControlGroup) RaftRefused() uint64 { return g.mux.guard.refused.Load() }
