package raftnet

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/rpc"
)

// This file is the seeded in-memory network the control group uses in tests
// and in the simulator: a raft.Transport per address (Raft RPCs as messages)
// and an rpc.StreamLayer per address (net.Pipe connections for the control RPC).
//
// It never blocks towards a cut or closed peer: a send over a cut link fails at
// once, as a firewall drop followed by a connection error would. Delays are
// real timers, so inside a testing/synctest bubble they cost no wall time.

// Link describes one direction of a link in a MemNetwork.
type Link struct {
	Delay  time.Duration // fixed one-way delay
	Jitter time.Duration // extra uniform random delay in [0, Jitter)
	Loss   float64       // probability in [0,1] that a message (or dial) is lost
}

type linkKey struct{ from, to string }

// MemNetwork is a seeded in-memory network for Raft transports and control
// RPC streams. All methods are safe for concurrent use. Randomness (loss,
// jitter) comes from one RNG seeded by NewMemNetwork; goroutine scheduling
// still makes runs differ, so a seed reproduces a run's fault pattern, not its
// exact interleaving.
type MemNetwork struct {
	mu         sync.Mutex
	rng        *rand.Rand
	transports map[string]*MemTransport
	listeners  map[string]*memStreamLayer
	links      map[linkKey]Link
	defLink    Link
	cut        map[linkKey]bool
	conns      map[*pipeConn]linkKey
	holes      map[string]bool
	timeout    time.Duration
}

// NewMemNetwork returns an empty network whose randomness is seeded by seed.
func NewMemNetwork(seed int64) *MemNetwork {
	return &MemNetwork{
		rng:        rand.New(rand.NewSource(seed)),
		transports: map[string]*MemTransport{},
		listeners:  map[string]*memStreamLayer{},
		links:      map[linkKey]Link{},
		cut:        map[linkKey]bool{},
		conns:      map[*pipeConn]linkKey{},
		holes:      map[string]bool{},
		timeout:    time.Second,
	}
}

// SetTimeout sets how long a Raft RPC waits for the peer to take and answer it
// (default 1 s; snapshots get 10×).
func (n *MemNetwork) SetTimeout(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.timeout = d
}

// SetDefaultLink sets the behaviour of every link without its own SetLink.
func (n *MemNetwork) SetDefaultLink(l Link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.defLink = l
}

// SetLink sets the behaviour of the directed link from → to.
func (n *MemNetwork) SetLink(from, to string, l Link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.links[linkKey{from, to}] = l
}

// Cut drops everything sent from → to (one direction: an asymmetric
// partition). Open RPC streams between the two are closed.
func (n *MemNetwork) Cut(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cutLocked(from, to)
}

func (n *MemNetwork) cutLocked(from, to string) {
	n.cut[linkKey{from, to}] = true
	for c, k := range n.conns {
		if (k.from == from && k.to == to) || (k.from == to && k.to == from) {
			delete(n.conns, c)
			go c.closeBoth()
		}
	}
}

// Partition cuts every link between a and b in both directions.
func (n *MemNetwork) Partition(a, b []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.cutLocked(x, y)
			n.cutLocked(y, x)
		}
	}
}

// Isolate cuts addr off from every other address the network knows.
func (n *MemNetwork) Isolate(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, other := range n.addrsLocked() {
		if other != addr {
			n.cutLocked(addr, other)
			n.cutLocked(other, addr)
		}
	}
}

// Heal removes every cut (link delays and loss stay).
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[linkKey]bool{}
	n.holes = map[string]bool{}
}

// Blackhole makes addr's host vanish the way a dead or frozen machine
// does: Raft messages to and from it are lost, bytes written on open RPC
// streams to or from it disappear, dials to it hang until their deadline,
// and nothing is closed (no TCP reset). Heal ends it.
func (n *MemNetwork) Blackhole(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.holes[addr] = true
}

func (n *MemNetwork) inHole(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.holes[a] || n.holes[b]
}

// HealLink removes the cut from → to.
func (n *MemNetwork) HealLink(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, linkKey{from, to})
}

func (n *MemNetwork) addrsLocked() []string {
	seen := map[string]bool{}
	for a := range n.transports {
		seen[a] = true
	}
	for a := range n.listeners {
		seen[a] = true
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// route decides the fate of one message from → to: its delay, or an error if
// it is cut or lost. It never blocks.
func (n *MemNetwork) route(from, to string) (time.Duration, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.holes[from] || n.holes[to] {
		return 0, fmt.Errorf("memnet: message %s -> %s lost (blackhole)", from, to)
	}
	if n.cut[linkKey{from, to}] {
		return 0, fmt.Errorf("memnet: link %s -> %s is cut", from, to)
	}
	l, ok := n.links[linkKey{from, to}]
	if !ok {
		l = n.defLink
	}
	if l.Loss > 0 && n.rng.Float64() < l.Loss {
		return 0, fmt.Errorf("memnet: message %s -> %s lost", from, to)
	}
	d := l.Delay
	if l.Jitter > 0 {
		d += time.Duration(n.rng.Int63n(int64(l.Jitter)))
	}
	return d, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Transport returns the Raft transport for addr, creating it on first use.
// After Close, a later call returns a fresh transport (a restarted node).
func (n *MemNetwork) Transport(addr string) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.transports[addr]; ok {
		return t
	}
	t := &MemTransport{
		net:      n,
		addr:     addr,
		consumer: make(chan raft.RPC),
		closed:   make(chan struct{}),
	}
	n.transports[addr] = t
	return t
}

// MemTransport is one node's raft.Transport on a MemNetwork.
type MemTransport struct {
	net       *MemNetwork
	addr      string
	consumer  chan raft.RPC
	closeOnce sync.Once
	closed    chan struct{}
}

var (
	_ raft.Transport   = (*MemTransport)(nil)
	_ raft.WithClose   = (*MemTransport)(nil)
	_ raft.WithPreVote = (*MemTransport)(nil)
)

// Consumer implements raft.Transport.
func (t *MemTransport) Consumer() <-chan raft.RPC { return t.consumer }

// LocalAddr implements raft.Transport.
func (t *MemTransport) LocalAddr() raft.ServerAddress { return raft.ServerAddress(t.addr) }

// AppendEntriesPipeline implements raft.Transport; pipelining is not supported.
func (t *MemTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries implements raft.Transport.
func (t *MemTransport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	out, err := t.send(string(target), args, nil, 1)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.AppendEntriesResponse)
	return nil
}

// RequestVote implements raft.Transport.
func (t *MemTransport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	out, err := t.send(string(target), args, nil, 1)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.RequestVoteResponse)
	return nil
}

// RequestPreVote implements raft.WithPreVote.
func (t *MemTransport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	out, err := t.send(string(target), args, nil, 1)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.RequestPreVoteResponse)
	return nil
}

// InstallSnapshot implements raft.Transport.
func (t *MemTransport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	out, err := t.send(string(target), args, data, 10)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.InstallSnapshotResponse)
	return nil
}

// TimeoutNow implements raft.Transport.
func (t *MemTransport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	out, err := t.send(string(target), args, nil, 1)
	if err != nil {
		return err
	}
	*resp = *out.(*raft.TimeoutNowResponse)
	return nil
}

// EncodePeer implements raft.Transport.
func (t *MemTransport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport.
func (t *MemTransport) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }

// SetHeartbeatHandler implements raft.Transport; heartbeats take the normal path.
func (t *MemTransport) SetHeartbeatHandler(func(raft.RPC)) {}

// Close implements raft.WithClose: the address stops answering, and sends
// from it fail.
func (t *MemTransport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		t.net.mu.Lock()
		if t.net.transports[t.addr] == t {
			delete(t.net.transports, t.addr)
		}
		t.net.mu.Unlock()
	})
	return nil
}

func (t *MemTransport) send(target string, args any, data io.Reader, timeoutScale int) (any, error) {
	select {
	case <-t.closed:
		return nil, fmt.Errorf("memnet: transport %s closed", t.addr)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.closed:
			cancel()
		case <-ctx.Done():
		}
	}()

	// Until the peer takes the request, a failure is a *rpc.DialError (it never
	// reached the peer), as a failed dial is on a real network.
	d, err := t.net.route(t.addr, target)
	if err != nil {
		return nil, &rpc.DialError{Err: err}
	}
	if err := sleepCtx(ctx, d); err != nil {
		return nil, err
	}
	t.net.mu.Lock()
	peer := t.net.transports[target]
	timeout := t.net.timeout * time.Duration(timeoutScale)
	t.net.mu.Unlock()
	if peer == nil {
		return nil, &rpc.DialError{Err: fmt.Errorf("memnet: no transport at %s", target)}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	respCh := make(chan raft.RPCResponse, 1)
	select {
	case peer.consumer <- raft.RPC{Command: args, Reader: data, RespChan: respCh}:
	case <-peer.closed:
		return nil, &rpc.DialError{Err: fmt.Errorf("memnet: transport %s closed", target)}
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, &rpc.DialError{Err: fmt.Errorf("memnet: send to %s timed out", target)}
	}
	var resp raft.RPCResponse
	select {
	case resp = <-respCh:
	case <-peer.closed:
		return nil, fmt.Errorf("memnet: transport %s closed", target)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, fmt.Errorf("memnet: response from %s timed out", target)
	}
	// The answer travels back over the reverse link.
	d, err = t.net.route(target, t.addr)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	return resp.Response, nil
}

// StreamLayer returns the RPC stream layer for addr (listener plus dialer),
// creating it on first use. Connections are net.Pipe pairs; a dial over a cut
// link fails at once, and cutting a link closes the streams across it.
func (n *MemNetwork) StreamLayer(addr string) rpc.StreamLayer {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.listeners[addr]; ok {
		return l
	}
	l := &memStreamLayer{net: n, addr: addr, accept: make(chan net.Conn, 64), closed: make(chan struct{})}
	n.listeners[addr] = l
	return l
}

type memStreamLayer struct {
	net       *MemNetwork
	addr      string
	accept    chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func (l *memStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memStreamLayer) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.net.mu.Lock()
		if l.net.listeners[l.addr] == l {
			delete(l.net.listeners, l.addr)
		}
		l.net.mu.Unlock()
	})
	return nil
}

func (l *memStreamLayer) Addr() net.Addr { return rpc.Addr(l.addr) }

func (l *memStreamLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if l.net.inHole(l.addr, addr) {
		<-ctx.Done() // a SYN nobody answers
		return nil, fmt.Errorf("memnet: dial %s: %w", addr, ctx.Err())
	}
	d, err := l.net.route(l.addr, addr)
	if err != nil {
		return nil, err
	}
	if _, err := l.net.route(addr, l.addr); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, d); err != nil {
		return nil, err
	}
	l.net.mu.Lock()
	peer := l.net.listeners[addr]
	if peer == nil || l.net.cut[linkKey{l.addr, addr}] || l.net.cut[linkKey{addr, l.addr}] {
		l.net.mu.Unlock()
		return nil, fmt.Errorf("memnet: connection to %s refused", addr)
	}
	a, b := net.Pipe()
	ca := &pipeConn{Conn: a, net: l.net, local: l.addr, remote: addr}
	cb := &pipeConn{Conn: b, net: l.net, local: addr, remote: l.addr}
	ca.peer, cb.peer = cb, ca
	l.net.conns[ca] = linkKey{l.addr, addr}
	l.net.mu.Unlock()
	select {
	case peer.accept <- cb:
		return ca, nil
	case <-peer.closed:
	default:
	}
	ca.closeBoth()
	return nil, fmt.Errorf("memnet: connection to %s refused", addr)
}

type pipeConn struct {
	net.Conn
	net           *MemNetwork
	peer          *pipeConn
	local, remote string
}

// Write discards what is written while either end is in a blackhole.
func (c *pipeConn) Write(p []byte) (int, error) {
	if c.net.inHole(c.local, c.remote) {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *pipeConn) LocalAddr() net.Addr  { return rpc.Addr(c.local) }
func (c *pipeConn) RemoteAddr() net.Addr { return rpc.Addr(c.remote) }

func (c *pipeConn) Close() error {
	c.net.mu.Lock()
	delete(c.net.conns, c)
	delete(c.net.conns, c.peer)
	c.net.mu.Unlock()
	return c.Conn.Close()
}

func (c *pipeConn) closeBoth() {
	_ = c.Conn.Close()
	_ = c.peer.Conn.Close()
}
