package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	netrpc "net/rpc"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/identity"
)

// The control group's RPC is net/rpc (gob) multiplexed on the Raft listener:
// every connection starts with one byte naming its protocol. net/rpc is in the
// standard library, frozen and well understood, multiplexes concurrent calls on
// one connection, and runs over any net.Conn — so the same code runs over TCP,
// over TLS, and over the in-memory pipes of RaftMemNetwork inside synctest.
// gRPC or HTTP/2 would add a large dependency and their own connection
// management for four small request/response calls.

const (
	ProtoRaft byte = 0x01 // hashicorp/raft NetworkTransport stream
	ProtoRPC  byte = 0x02 // net/rpc stream

	// protoReadTimeout bounds how long an accepted connection may take to
	// name its protocol.
	protoReadTimeout = 10 * time.Second
	// rpcWriteTimeout bounds every write on an RPC connection: net/rpc
	// writes under a lock, so one write blocked on a peer that stopped
	// reading would otherwise block every later call on that connection.
	rpcWriteTimeout = 10 * time.Second
)

// writeDeadlineConn sets a fresh write deadline before every write.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// Mux accepts connections on a StreamLayer and hands each to Raft or to the
// RPC server by its first byte. Unknown bytes close the connection. With
// Authenticate set, a connection must first prove its peer (conn.go).
type Mux struct {
	stream StreamLayer
	opts   MuxOptions
	raft   *raftStream // nil when Raft has its own transport
	guard  *identity.Guard
	log    *slog.Logger
	// pending caps connections not yet past authentication (limits.go).
	pending *pendingLimiter
	wg      sync.WaitGroup
	refuse  LogLimiter

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// MuxOptions configures a mux.
type MuxOptions struct {
	// Server returns the RPC server for one connection's proven peer
	// (authenticated false without Authenticate).
	Server func(p identity.Peer, authenticated bool) *netrpc.Server
	// Authenticate proves the peer of an accepted connection; nil trusts all.
	Authenticate func(context.Context, net.Conn) (identity.Peer, error)
	// Revocation checks a proven peer against the deny-list (identity/revoke.go).
	Revocation *identity.Revocation
	// Raft is the Raft guard's view of this node's Raft server.
	Raft identity.RaftView
	// RPC limits (conn.go).
	MaxMessage              int
	IdleTimeout, MsgTimeout time.Duration
	// Limits before authentication (limits.go); 0 takes the default.
	MaxPending, MaxPendingPerSource, MaxInflight int
	// MaxSnapshot bounds one InstallSnapshot stream (> 0).
	MaxSnapshot int64
	// RaftRunning reports whether this node runs Raft now (nil: always).
	// A member on the stream runs none (cluster/raftless.go): its Raft streams are
	// closed on the first byte, so nothing queues for a Raft that is not
	// there.
	RaftRunning func() bool
}

func NewMux(stream StreamLayer, opts MuxOptions, withRaft bool, log *slog.Logger) *Mux {
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPendingConns
	}
	if opts.MaxPendingPerSource == 0 {
		opts.MaxPendingPerSource = DefaultMaxPendingPerSource
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = DefaultMaxInflightRPCs
	}
	m := &Mux{stream: stream, opts: opts, log: log, conns: map[net.Conn]struct{}{},
		pending: newPendingLimiter(opts.MaxPending, opts.MaxPendingPerSource), guard: identity.NewGuard(opts.Raft, opts.MaxSnapshot)}
	m.refuse.Every = time.Second
	if withRaft {
		m.raft = &raftStream{stream: stream, accept: make(chan net.Conn), closed: make(chan struct{})}
	}
	return m
}

// refused logs a refused connection, at most once a second.
func (m *Mux) refused(c net.Conn, err error) {
	if m.refuse.Allow() {
		m.log.Warn("cluster: refused a connection (further refusals within 1s not logged)", "remote", c.RemoteAddr().String(), "err", err)
	}
}

func (m *Mux) Start() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			c, err := m.stream.Accept()
			if err != nil {
				if m.isClosed() || errors.Is(err, net.ErrClosed) {
					return
				}
				m.log.Warn("cluster: accept failed", "err", err)
				// A transient accept error (EMFILE) must not spin.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			release, reason := m.pending.acquire(c.RemoteAddr())
			if reason != "" {
				identity.CountRefusal(reason)
				m.refused(c, fmt.Errorf("too many connections not yet authenticated (%s)", reason))
				_ = c.Close()
				continue
			}
			if !m.track(c) {
				release()
				_ = c.Close()
				return
			}
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.handle(c, release)
			}()
		}
	}()
}

func (m *Mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *Mux) untrack(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, c)
}

// handle serves one accepted connection; release frees its pending slot
// once it is past authentication and its protocol byte.
func (m *Mux) handle(c net.Conn, release func()) {
	defer release()
	var peer identity.Peer
	authenticated := m.opts.Authenticate != nil
	if authenticated {
		_ = c.SetDeadline(time.Now().Add(authTimeout))
		ctx, cancel := context.WithTimeout(context.Background(), authTimeout)
		p, err := m.opts.Authenticate(ctx, c)
		cancel()
		if err != nil {
			identity.CountRefusal("handshake")
			m.refused(c, err)
			m.untrack(c)
			_ = c.Close()
			return
		}
		if m.opts.Revocation.Check(c, p) != nil {
			m.untrack(c)
			_ = c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		peer = p
	}
	// conn is c checked against the deny-list at every use; c stays the
	// tracked connection.
	conn := m.opts.Revocation.Wrap(c, peer)
	if !authenticated {
		conn = c
	}
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(protoReadTimeout))
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		m.untrack(c)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	release()
	switch {
	case b[0] == ProtoRPC:
		// Returns when the connection ends and closes it. Replies to a peer
		// that stopped reading fail after rpcWriteTimeout instead of
		// blocking the connection's sender forever; requests are bounded in
		// size and time.
		lc := newGobLimitConn(conn, m.opts.MaxMessage, m.opts.IdleTimeout, m.opts.MsgTimeout)
		conn := &writeDeadlineConn{Conn: lc, timeout: rpcWriteTimeout}
		m.opts.Server(peer, authenticated).ServeCodec(newGobServerCodec(conn, m.opts.MaxInflight))
		m.untrack(c)
	case b[0] == ProtoRaft && m.raft != nil:
		if m.opts.RaftRunning != nil && !m.opts.RaftRunning() {
			m.log.Debug("cluster: raft stream refused: this node runs no raft", "remote", c.RemoteAddr().String())
			m.untrack(c)
			_ = c.Close()
			return
		}
		// Only a node (voter-capable) certificate speaks Raft: a member's
		// or an operator's is cut off on this first byte.
		if authenticated && !peer.VoterCapable() && !m.guard.Off() {
			err := identity.Refuse(identity.RefusedRole, "%s may not open a Raft stream (a node certificate is needed; a member certificate serves the RPC path only)", peer)
			m.guard.Count(err)
			m.refused(c, err)
			m.untrack(c)
			_ = c.Close()
			return
		}
		// Raft owns it now; it stays tracked (until raft closes it) so
		// close() can end raft's blocked reads.
		rc := conn
		if authenticated {
			rc = identity.GuardRaft(conn, peer, m.guard, func(err error) { m.refused(c, err) })
		}
		tc := &trackedConn{Conn: rc, untrack: func() { m.untrack(c) }}
		select {
		case m.raft.accept <- tc:
		case <-m.raft.closed:
			_ = tc.Close()
		}
	default:
		m.log.Warn("cluster: connection with unknown protocol byte", "byte", b[0], "remote", c.RemoteAddr().String())
		m.untrack(c)
		_ = c.Close()
	}
}

func (m *Mux) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	conns := make([]net.Conn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	_ = m.stream.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	if m.raft != nil {
		m.raft.close()
	}
	m.wg.Wait()
}

// Raft is the raft.StreamLayer of the Raft streams the mux accepts and
// dials: hashicorp/raft's NetworkTransport runs over it. Nil when the mux
// was made without Raft (its Raft streams are refused).
func (m *Mux) Raft() raft.StreamLayer {
	if m.raft == nil {
		return nil
	}
	return m.raft
}

// Guard is the Raft guard of the mux's Raft streams.
func (m *Mux) Guard() *identity.Guard { return m.guard }

// trackedConn untracks itself from the mux when closed.
type trackedConn struct {
	net.Conn
	once    sync.Once
	untrack func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.untrack)
	return c.Conn.Close()
}

// raftStream is the raft.StreamLayer view of the mux.
type raftStream struct {
	stream    StreamLayer
	accept    chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

var _ raft.StreamLayer = (*raftStream)(nil)

func (r *raftStream) Accept() (net.Conn, error) {
	select {
	case c := <-r.accept:
		return c, nil
	case <-r.closed:
		return nil, net.ErrClosed
	}
}

func (r *raftStream) Close() error {
	r.close()
	return nil
}

func (r *raftStream) close() { r.closeOnce.Do(func() { close(r.closed) }) }

func (r *raftStream) Addr() net.Addr { return r.stream.Addr() }

func (r *raftStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := r.stream.Dial(ctx, string(addr))
	if err != nil {
		return nil, &DialError{err} // the peer is unreachable: raftnet.WaitingTransport waits on it
	}
	// With authentication, Raft goes only to a server that proved a node
	// certificate: a member's certificate is never replicated to, never
	// asked for a vote, so it can never be counted towards a quorum.
	if pc, ok := c.(*provenConn); ok && !pc.peer.VoterCapable() {
		_ = c.Close()
		return nil, &DialError{fmt.Errorf("cluster: Raft server at %s is %s (%s certificate), not a node", addr, pc.peer, pc.peer.Role)}
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{ProtoRaft}); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}
