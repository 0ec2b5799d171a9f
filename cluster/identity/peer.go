package identity

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// The trust boundary of the Raft/RPC port (docs/security.md). With
// cluster.ControlConfig.Authenticate set, every accepted connection must prove who
// is on the other end (mutual TLS: the node id in the peer's certificate)
// before one byte of Raft or RPC is read from it; then
//
//   - only a node (voter-capable) certificate may open a Raft stream: a
//     member's or an operator's is refused on the first Raft byte, and a
//     Raft dial accepts only a server with a node certificate (cluster/rpc);
//   - every Raft message must carry the proven id in its header (a node
//     cannot speak for another), votes and log come only from voters of
//     the latest configuration, log only from the leader of its term,
//     TimeoutNow only from the leader this node follows, and every
//     configuration carried must decode (see raftguard.go);
//   - every forwarded command is checked by cluster.ControlConfig.Authorize against
//     the proven id before it reaches Raft, and Remove of another server
//     needs an operator;
//   - every RPC message is bounded in size (MaxRPCMessage) and in time
//     (RPCIdleTimeout between requests, RPCMessageTimeout within one).
//
// Without Authenticate (loopback clusters, tests, Insecure) every peer is
// trusted as before and no command is authorized.

// Role is what a peer's certificate proves it may be (docs/security.md,
// "Roles"). The role checks apply only where cluster.ControlConfig.Authenticate is
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
	// proposals (checked by cluster.ControlConfig.Authorize), the committed-state
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

// ErrMessageTooLarge: an RPC or Raft message over its size limit. The
// connection is closed.
var ErrMessageTooLarge = errors.New("cluster: message too large")

// TLSAuthenticator returns a cluster.ControlConfig.Authenticate for a StreamLayer
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
