package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/rpc"
	"sync"
	"sync/atomic"
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
	protoRaft byte = 0x01 // hashicorp/raft NetworkTransport stream
	protoRPC  byte = 0x02 // net/rpc stream

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

// StreamLayer is the connection layer shared by Raft and the control RPC: a
// listener plus a dialer. NewTCPStreamLayer is plain TCP; NewTLSStreamLayer
// wraps any StreamLayer in TLS; RaftMemNetwork.StreamLayer is in memory.
type StreamLayer interface {
	net.Listener
	// Dial opens a connection to addr (host:port), honouring ctx's deadline.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// NewTCPStreamLayer listens on bindAddr (host:port, port 0 picks one). The
// listener's Addr is advertiseAddr if set, else the bound address.
func NewTCPStreamLayer(bindAddr, advertiseAddr string) (StreamLayer, error) {
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on %q: %w", bindAddr, err)
	}
	addr := ln.Addr()
	if advertiseAddr != "" {
		addr = stringAddr(advertiseAddr)
	}
	return &tcpStreamLayer{Listener: ln, addr: addr}, nil
}

type tcpStreamLayer struct {
	net.Listener
	addr net.Addr
}

func (l *tcpStreamLayer) Addr() net.Addr { return l.addr }

func (l *tcpStreamLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// NewTLSStreamLayer wraps inner in TLS: accepted connections are served with
// server, dialed ones use client (its ServerName is left to the caller; set
// it or use VerifyPeerCertificate for node certificates).
func NewTLSStreamLayer(inner StreamLayer, server, client *tls.Config) StreamLayer {
	return &tlsStreamLayer{StreamLayer: inner, server: server, client: client}
}

type tlsStreamLayer struct {
	StreamLayer
	server, client *tls.Config
}

func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

func (l *tlsStreamLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// mux accepts connections on a StreamLayer and hands each to Raft or to the
// RPC server by its first byte. Unknown bytes close the connection. With
// authenticate set, a connection must first prove its peer (auth.go).
type mux struct {
	stream StreamLayer
	opts   muxOptions
	raft   *raftStream // nil when Raft has its own transport
	guard  *identity.Guard
	log    *slog.Logger
	// pending caps connections not yet past authentication (limits.go).
	pending *pendingLimiter
	wg      sync.WaitGroup
	refuse  logLimiter

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// muxOptions configures a mux.
type muxOptions struct {
	// server returns the RPC server for one connection's proven peer
	// (authenticated false without authenticate).
	server func(p Peer, authenticated bool) *rpc.Server
	// authenticate proves the peer of an accepted connection; nil trusts all.
	authenticate func(context.Context, net.Conn) (Peer, error)
	// revocation checks a proven peer against the deny-list (revoke.go).
	revocation *identity.Revocation
	// raft is the Raft guard's view of this node's Raft server.
	raft identity.RaftView
	// RPC limits (auth.go).
	maxMessage              int
	idleTimeout, msgTimeout time.Duration
	// Limits before authentication (limits.go); 0 takes the default.
	maxPending, maxPendingPerSource, maxInflight int
	// maxSnapshot bounds one InstallSnapshot stream (> 0).
	maxSnapshot int64
	// raftRunning reports whether this node runs Raft now (nil: always).
	// A member on the stream runs none (raftless.go): its Raft streams are
	// closed on the first byte, so nothing queues for a Raft that is not
	// there.
	raftRunning func() bool
}

func newMux(stream StreamLayer, opts muxOptions, withRaft bool, log *slog.Logger) *mux {
	if opts.maxPending == 0 {
		opts.maxPending = DefaultMaxPendingConns
	}
	if opts.maxPendingPerSource == 0 {
		opts.maxPendingPerSource = DefaultMaxPendingPerSource
	}
	if opts.maxInflight <= 0 {
		opts.maxInflight = DefaultMaxInflightRPCs
	}
	m := &mux{stream: stream, opts: opts, log: log, conns: map[net.Conn]struct{}{},
		pending: newPendingLimiter(opts.maxPending, opts.maxPendingPerSource), guard: identity.NewGuard(opts.raft, opts.maxSnapshot)}
	m.refuse.every = time.Second
	if withRaft {
		m.raft = &raftStream{stream: stream, accept: make(chan net.Conn), closed: make(chan struct{})}
	}
	return m
}

// refused logs a refused connection, at most once a second.
func (m *mux) refused(c net.Conn, err error) {
	if m.refuse.allow() {
		m.log.Warn("cluster: refused a connection (further refusals within 1s not logged)", "remote", c.RemoteAddr().String(), "err", err)
	}
}

func (m *mux) start() {
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

func (m *mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *mux) untrack(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, c)
}

// handle serves one accepted connection; release frees its pending slot
// once it is past authentication and its protocol byte.
func (m *mux) handle(c net.Conn, release func()) {
	defer release()
	var peer Peer
	authenticated := m.opts.authenticate != nil
	if authenticated {
		_ = c.SetDeadline(time.Now().Add(authTimeout))
		ctx, cancel := context.WithTimeout(context.Background(), authTimeout)
		p, err := m.opts.authenticate(ctx, c)
		cancel()
		if err != nil {
			identity.CountRefusal("handshake")
			m.refused(c, err)
			m.untrack(c)
			_ = c.Close()
			return
		}
		if m.opts.revocation.Check(c, p) != nil {
			m.untrack(c)
			_ = c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		peer = p
	}
	// conn is c checked against the deny-list at every use; c stays the
	// tracked connection.
	conn := m.opts.revocation.Wrap(c, peer)
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
	case b[0] == protoRPC:
		// Returns when the connection ends and closes it. Replies to a peer
		// that stopped reading fail after rpcWriteTimeout instead of
		// blocking the connection's sender forever; requests are bounded in
		// size and time.
		lc := newGobLimitConn(conn, m.opts.maxMessage, m.opts.idleTimeout, m.opts.msgTimeout)
		conn := &writeDeadlineConn{Conn: lc, timeout: rpcWriteTimeout}
		m.opts.server(peer, authenticated).ServeCodec(newGobServerCodec(conn, m.opts.maxInflight))
		m.untrack(c)
	case b[0] == protoRaft && m.raft != nil:
		if m.opts.raftRunning != nil && !m.opts.raftRunning() {
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

func (m *mux) close() {
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
		return nil, &errDial{err} // the peer is unreachable: raftwait.go waits on it
	}
	// With authentication, Raft goes only to a server that proved a node
	// certificate: a member's certificate is never replicated to, never
	// asked for a vote, so it can never be counted towards a quorum.
	if pc, ok := c.(*provenConn); ok && !pc.peer.VoterCapable() {
		_ = c.Close()
		return nil, &errDial{fmt.Errorf("cluster: Raft server at %s is %s (%s certificate), not a node", addr, pc.peer, pc.peer.Role)}
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{protoRaft}); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// rpcPool keeps one net/rpc client per remote address; net/rpc multiplexes
// concurrent calls on it. A peer whose host vanished (no TCP reset: its
// SYNs and segments are dropped) must not make calls wait on it longer
// than their own deadlines, nor cost a fresh dial per call: at most one
// dial per address is in flight (bounded by rpcDialTimeout, shared by the
// callers that wait for it, each within its own ctx), and a connection is
// dropped only once it has been silent — requests out, no reply — for
// rpcSilentDrop, not whenever one caller stops waiting (a confirm round
// stops waiting for the slower voters as soon as it has its quorum).
type rpcPool struct {
	stream     StreamLayer
	maxMessage int
	// dialTimeout bounds one dial (TCP, TLS and the protocol byte);
	// silentDrop is how long a connection may go without a reply while
	// calls are out on it before a call that gives up drops it.
	dialTimeout, silentDrop time.Duration

	mu     sync.Mutex
	conns  map[string]*pooledClient
	dials  map[string]*poolDial
	closed bool
	stop   context.CancelFunc // ends dials in flight
	ctx    context.Context
	wg     sync.WaitGroup
}

const (
	// rpcDialTimeout bounds one dial of a control RPC connection: long
	// enough for a TLS handshake on a loaded machine and for one SYN
	// retransmission (1 s) to a host that just came back.
	rpcDialTimeout = 2 * time.Second
	// rpcSilentDrop: a connection with calls out and no reply for this
	// long is taken for wedged (a vanished host) once a call on it gives
	// up. Control RPCs are answered in milliseconds, except forwarded
	// commands and confirm-age queries that wait for Raft (up to their
	// deadlines); those share the connection with the frequent renewals
	// and confirms, whose replies keep it from counting as silent.
	rpcSilentDrop = time.Second
)

// poolDial is a dial in flight; done closes when it ends.
type poolDial struct {
	done chan struct{}
	c    *pooledClient
	err  error
}

type pooledClient struct {
	*rpc.Client
	closedByUs atomic.Bool // set before we Close it: ErrShutdown then may follow a sent request

	mu          sync.Mutex
	out         int       // calls sent and not yet ended (abandoned ones included)
	silentSince time.Time // with out > 0: the last reply, or the first send after it
}

// sent notes a call going out at now.
func (c *pooledClient) sent(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == 0 {
		c.silentSince = now
	}
	c.out++
}

// ended notes that a call ended at now, with a reply from the peer (heard)
// or with the connection's failure.
func (c *pooledClient) ended(now time.Time, heard bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out--
	if heard {
		c.silentSince = now
	}
}

// silentFor is how long calls have been out on c without any reply.
func (c *pooledClient) silentFor(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out <= 0 {
		return 0
	}
	return now.Sub(c.silentSince)
}

func newRPCPool(stream StreamLayer, maxMessage int) *rpcPool {
	ctx, stop := context.WithCancel(context.Background())
	return &rpcPool{stream: stream, maxMessage: maxMessage, dialTimeout: rpcDialTimeout, silentDrop: rpcSilentDrop,
		conns: map[string]*pooledClient{}, dials: map[string]*poolDial{}, ctx: ctx, stop: stop}
}

// errDial marks a call that never reached the peer: safe to retry.
type errDial struct{ err error }

func (e *errDial) Error() string { return "dial: " + e.err.Error() }
func (e *errDial) Unwrap() error { return e.err }

// client returns the pooled client for addr, dialing it if there is none:
// the first caller starts the dial, later ones wait for the same dial,
// each within its ctx.
func (p *rpcPool) client(ctx context.Context, addr string) (*pooledClient, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrControlClosed
	}
	if c, ok := p.conns[addr]; ok {
		p.mu.Unlock()
		return c, nil
	}
	d, ok := p.dials[addr]
	if !ok {
		d = &poolDial{done: make(chan struct{})}
		p.dials[addr] = d
		p.wg.Add(1)
		go p.dial(addr, d)
	}
	p.mu.Unlock()
	select {
	case <-d.done:
		if d.err != nil {
			return nil, d.err
		}
		return d.c, nil
	case <-ctx.Done():
		return nil, &errDial{ctx.Err()}
	}
}

// dial connects to addr for everyone waiting on d.
func (p *rpcPool) dial(addr string, d *poolDial) {
	defer p.wg.Done()
	c, err := p.connect(addr)
	p.mu.Lock()
	delete(p.dials, addr)
	switch {
	case err != nil:
	case p.closed:
		c.closedByUs.Store(true)
		_ = c.Close()
		err = ErrControlClosed
	default:
		p.conns[addr] = c
	}
	p.mu.Unlock()
	if err != nil {
		d.err = err
		if !errors.Is(err, ErrControlClosed) {
			d.err = &errDial{err}
		}
	}
	d.c = c
	close(d.done)
}

func (p *rpcPool) connect(addr string) (*pooledClient, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	defer cancel()
	conn, err := p.stream.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(p.dialTimeout))
	if _, err := conn.Write([]byte{protoRPC}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	lc := newGobLimitConn(conn, p.maxMessage, 0, DefaultRPCMessageTimeout)
	return &pooledClient{Client: rpc.NewClient(&writeDeadlineConn{Conn: lc, timeout: rpcWriteTimeout})}, nil
}

func (p *rpcPool) drop(addr string, c *pooledClient) {
	p.mu.Lock()
	if p.conns[addr] == c {
		delete(p.conns, addr)
	}
	p.mu.Unlock()
	c.closedByUs.Store(true)
	_ = c.Close()
}

// call performs one RPC bounded by ctx. A *errDial error means the request
// was never sent. A context error means the outcome is unknown.
func (p *rpcPool) call(ctx context.Context, addr, method string, args, reply any) error {
	c, err := p.client(ctx, addr)
	if err != nil {
		return err
	}
	// Go writes the request synchronously (bounded by rpcWriteTimeout); run
	// it aside so ctx is honoured even while a write is stuck. The
	// goroutine sees the call end even after the caller gave up, so a late
	// reply still counts as the peer being heard.
	done := make(chan *rpc.Call, 1)
	c.sent(time.Now())
	go func() {
		call := <-c.Go(method, args, reply, make(chan *rpc.Call, 1)).Done
		c.ended(time.Now(), heardFrom(call.Error))
		done <- call
	}()
	select {
	case call := <-done:
		if heardFrom(call.Error) {
			return call.Error
		}
		// Connection-level failure: the client is unusable. net/rpc
		// reports ErrShutdown without sending when the connection had
		// already died by itself; if we closed it, a request may have
		// gone out, so the outcome is unknown.
		unsent := errors.Is(call.Error, rpc.ErrShutdown) && !c.closedByUs.Load()
		p.drop(addr, c)
		if unsent {
			return &errDial{call.Error}
		}
		return call.Error
	case <-ctx.Done():
		// The caller stopped waiting; the call may still be answered
		// (into nothing). A connection that has had calls out and no
		// reply for silentDrop is wedged (a peer that vanished without a
		// reset): drop it so the next call dials afresh; calls still
		// pending on it end as unknown outcomes. A peer that merely lost
		// a race (a confirm round had its quorum without it) keeps its
		// connection.
		if c.silentFor(time.Now()) >= p.silentDrop {
			p.drop(addr, c)
		}
		return ctx.Err()
	}
}

// heardFrom reports whether a call's outcome came from the peer: a reply,
// or an error the server returned.
func heardFrom(err error) bool {
	var se rpc.ServerError
	return err == nil || errors.As(err, &se)
}

func (p *rpcPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*pooledClient{}
	p.mu.Unlock()
	p.stop()
	for _, c := range conns {
		c.closedByUs.Store(true)
		_ = c.Close()
	}
	p.wg.Wait()
}
