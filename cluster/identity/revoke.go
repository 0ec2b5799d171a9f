package identity

import (
	"errors"
	"net"
	"sync"

	"github.com/tenurehq/tenure/internal/mutation"
)

// Revocation (docs/security.md, "Revoking a node"): with
// cluster.ControlConfig.Revoked set, every authenticated connection of the
// Raft/RPC port — accepted or dialed, Raft, RPC or the committed-state
// stream — is checked against the deny-list when its peer is proven (the
// handshake) and again on every read and write after it, so a connection
// that was open when its peer was revoked is closed at its next use. Each
// refusal counts in tenure_control_conn_refused_total{reason="revoked"}
// and is logged at most once a second.

// ErrPeerRevoked: the peer's id or certificate is on the committed
// deny-list (cluster.ControlConfig.Revoked). The connection is closed.
var ErrPeerRevoked = errors.New("cluster: peer revoked")

// Revocation checks one connection's peer against the deny-list.
type Revocation struct {
	// Revoked reports why p is denied (ErrPeerRevoked), nil if it is not.
	Revoked func(Peer) error
	// Log is told of each refusal (the caller rate-limits it).
	Log func(net.Conn, error)
}

// Check refuses p (counted and logged) when it is revoked.
func (r *Revocation) Check(c net.Conn, p Peer) error {
	if r == nil || r.Revoked == nil || mutation.On(mutation.HandshakeSkipsDenyList) {
		return nil
	}
	err := r.Revoked(p)
	if err != nil {
		CountRefusal("revoked")
		r.Log(c, err)
	}
	return err
}

// Wrap returns c checked against the deny-list at every use (nil r: c).
func (r *Revocation) Wrap(c net.Conn, p Peer) net.Conn {
	if r == nil || r.Revoked == nil {
		return c
	}
	return &revocableConn{Conn: c, peer: p, r: r}
}

// revocableConn re-checks its peer at every read and write: a peer revoked
// after the handshake is cut off at its connection's next use (a read
// blocked in the kernel returns at the peer's next bytes, then fails).
type revocableConn struct {
	net.Conn
	peer Peer
	r    *Revocation
	once sync.Once
}

func (c *revocableConn) refused() error {
	if err := c.r.Check(c.Conn, c.peer); err != nil {
		c.once.Do(func() { _ = c.Conn.Close() })
		return err
	}
	return nil
}

func (c *revocableConn) Read(p []byte) (int, error) {
	if err := c.refused(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if rerr := c.refused(); rerr != nil {
			return 0, rerr
		}
	}
	return n, err
}

func (c *revocableConn) Write(p []byte) (int, error) {
	if err := c.refused(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
