package gossip

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemNetwork is an in-memory network for memberlist transports, shared by
// tests and the simulation harness. It never blocks a sender: a packet to a
// closed, crashed or partitioned address, a lost packet, or one that finds
// the receiver's queue full is dropped; a stream dial to such an address
// fails at once. Per-link delay and loss are drawn from a seeded generator.
//
// It uses no sockets, no DNS and only timers and channels, so it works
// inside a testing/synctest bubble (addresses are IP literals such as
// "10.0.0.1:7946").
type MemNetwork struct {
	mu         sync.Mutex
	rng        *rand.Rand
	transports map[string]*MemTransport
	group      map[string]int // partition group per address; nil = no partition
	cut        map[memLink]bool
	links      map[memLink]memLinkConfig
	defLink    memLinkConfig
	stats      MemNetworkStats
}

// MemNetworkStats counts what the network did with packets.
type MemNetworkStats struct {
	Delivered uint64 // packets handed to a receiver
	Dropped   uint64 // packets dropped (unreachable, lost or receiver full)
	Dials     uint64 // streams opened
	DialFails uint64 // stream dials refused
}

type memLink struct{ from, to string }

type memLinkConfig struct {
	delay time.Duration
	loss  float64
}

const (
	memPacketQueue = 4096
	memStreamQueue = 64
)

var errMemUnreachable = errors.New("cluster: memnet: address unreachable")

// NewMemNetwork returns an empty network whose loss decisions come from seed.
func NewMemNetwork(seed int64) *MemNetwork {
	return &MemNetwork{
		rng:        rand.New(rand.NewPCG(uint64(seed), 0x7465_6e75_7265)),
		transports: make(map[string]*MemTransport),
		cut:        make(map[memLink]bool),
		links:      make(map[memLink]memLinkConfig),
	}
}

// NewTransport attaches a transport at addr, an IP literal with a port. The
// address may be reused after the previous transport there was closed.
func (n *MemNetwork) NewTransport(addr string) (*MemTransport, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: memnet: address %q is not ip:port: %w", addr, err)
	}
	addr = ap.String()
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.transports[addr]; ok && !old.closed {
		return nil, fmt.Errorf("cluster: memnet: address %q already in use", addr)
	}
	t := &MemTransport{
		net:      n,
		addr:     memAddr(addr),
		ip:       net.IP(ap.Addr().AsSlice()),
		port:     int(ap.Port()),
		packetCh: make(chan *memberlist.Packet, memPacketQueue),
		streamCh: make(chan net.Conn, memStreamQueue),
		conns:    make(map[*memConn]struct{}),
	}
	n.transports[addr] = t
	return t, nil
}

// Partition splits the network: addresses in different groups cannot reach
// each other. Addresses not named in any group form one more group together.
// It replaces any earlier partition and closes streams that cross it.
func (n *MemNetwork) Partition(groups ...[]string) {
	n.mu.Lock()
	n.group = make(map[string]int)
	for i, g := range groups {
		for _, a := range g {
			n.group[a] = i + 1
		}
	}
	broken := n.brokenLocked()
	n.mu.Unlock()
	closeAll(broken)
}

// Heal removes the partition and every Cut (link delay and loss stay).
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = nil
	n.cut = make(map[memLink]bool)
}

// Cut drops everything sent from → to (one direction only).
func (n *MemNetwork) Cut(from, to string) {
	n.mu.Lock()
	n.cut[memLink{from, to}] = true
	broken := n.brokenLocked()
	n.mu.Unlock()
	closeAll(broken)
}

// SetLink sets the delay and loss probability (0..1) of packets from → to.
// Streams see the delay once, when dialing, and no loss.
func (n *MemNetwork) SetLink(from, to string, delay time.Duration, loss float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.links[memLink{from, to}] = memLinkConfig{delay: max(delay, 0), loss: min(max(loss, 0), 1)}
}

// SetDefaultLink sets the delay and loss of every link without its own
// SetLink.
func (n *MemNetwork) SetDefaultLink(delay time.Duration, loss float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.defLink = memLinkConfig{delay: max(delay, 0), loss: min(max(loss, 0), 1)}
}

// linkLocked returns the configuration of from → to.
func (n *MemNetwork) linkLocked(from, to string) memLinkConfig {
	if l, ok := n.links[memLink{from, to}]; ok {
		return l
	}
	return n.defLink
}

// Close crashes the transport at addr: it stops sending and receiving and
// its streams break, while the memberlist above it keeps running until it
// is shut down. The address can then be reused by NewTransport.
func (n *MemNetwork) Close(addr string) {
	n.mu.Lock()
	t := n.transports[addr]
	n.mu.Unlock()
	if t != nil {
		t.close()
	}
}

// Stats returns packet and stream counters.
func (n *MemNetwork) Stats() MemNetworkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// reachableLocked reports whether from can currently send to to.
func (n *MemNetwork) reachableLocked(from, to string) (*MemTransport, bool) {
	dst := n.transports[to]
	src := n.transports[from]
	if dst == nil || dst.closed || src == nil || src.closed {
		return nil, false
	}
	if n.cut[memLink{from, to}] {
		return nil, false
	}
	if n.group != nil && n.group[from] != n.group[to] {
		return nil, false
	}
	return dst, true
}

// brokenLocked lists the open streams the current partition or cuts break.
func (n *MemNetwork) brokenLocked() []*memConn {
	var broken []*memConn
	for _, t := range n.transports {
		for c := range t.conns {
			if _, ok := n.reachableLocked(c.from, c.to); !ok {
				broken = append(broken, c)
			} else if _, ok := n.reachableLocked(c.to, c.from); !ok {
				broken = append(broken, c)
			}
		}
	}
	return broken
}

func closeAll(conns []*memConn) {
	for _, c := range conns {
		c.Close()
	}
}

func (n *MemNetwork) sendPacket(from, to string, b []byte) {
	n.mu.Lock()
	dst, ok := n.reachableLocked(from, to)
	link := n.linkLocked(from, to)
	if ok && link.loss > 0 && n.rng.Float64() < link.loss {
		ok = false
	}
	if !ok {
		n.stats.Dropped++
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	buf := append([]byte(nil), b...)
	if link.delay <= 0 {
		n.deliver(dst, from, buf)
		return
	}
	time.AfterFunc(link.delay, func() { n.deliver(dst, from, buf) })
}

func (n *MemNetwork) deliver(dst *MemTransport, from string, buf []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if dst.closed {
		n.stats.Dropped++
		return
	}
	select {
	case dst.packetCh <- &memberlist.Packet{Buf: buf, From: memAddr(from), Timestamp: time.Now()}:
		n.stats.Delivered++
	default:
		n.stats.Dropped++
	}
}

func (n *MemNetwork) dial(src *MemTransport, to string, timeout time.Duration) (net.Conn, error) {
	from := src.addr.String()
	n.mu.Lock()
	_, ok := n.reachableLocked(from, to)
	delay := n.linkLocked(from, to).delay
	if !ok {
		n.stats.DialFails++
	}
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s → %s: %w", from, to, errMemUnreachable)
	}
	if delay > 0 {
		if timeout > 0 && delay > timeout {
			time.Sleep(timeout)
			n.mu.Lock()
			n.stats.DialFails++
			n.mu.Unlock()
			return nil, fmt.Errorf("dial %s → %s: timeout after %v", from, to, timeout)
		}
		time.Sleep(delay)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	dst, ok := n.reachableLocked(from, to)
	if !ok {
		n.stats.DialFails++
		return nil, fmt.Errorf("dial %s → %s: %w", from, to, errMemUnreachable)
	}
	a, b := net.Pipe()
	client := &memConn{Conn: a, net: n, from: from, to: to, local: memAddr(from), remote: memAddr(to), owners: []*MemTransport{src, dst}}
	server := &memConn{Conn: b, net: n, from: to, to: from, local: memAddr(to), remote: memAddr(from), owners: []*MemTransport{src, dst}}
	select {
	case dst.streamCh <- server:
	default:
		n.stats.DialFails++
		a.Close()
		b.Close()
		return nil, fmt.Errorf("dial %s → %s: accept queue full", from, to)
	}
	for _, t := range client.owners {
		t.conns[client] = struct{}{}
		t.conns[server] = struct{}{}
	}
	n.stats.Dials++
	return client, nil
}

// MemTransport is one node's attachment to a MemNetwork. It implements
// memberlist.NodeAwareTransport.
type MemTransport struct {
	net      *MemNetwork
	addr     memAddr
	ip       net.IP
	port     int
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn

	// guarded by net.mu
	closed bool
	conns  map[*memConn]struct{}
}

var _ memberlist.NodeAwareTransport = (*MemTransport)(nil)

// Addr returns the transport's address (ip:port).
func (t *MemTransport) Addr() string { return t.addr.String() }

// FinalAdvertiseAddr returns the transport's own address; memberlist's
// advertise settings are ignored.
func (t *MemTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.ip, t.port, nil
}

// WriteTo sends a packet; it is dropped, never blocked, when undeliverable.
func (t *MemTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	if t.isClosed() {
		return now, fmt.Errorf("cluster: memnet: transport %s closed", t.addr)
	}
	t.net.sendPacket(t.addr.String(), addr, b)
	return now, nil
}

// WriteToAddress sends a packet to addr.Addr.
func (t *MemTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, addr.Addr)
}

// PacketCh delivers received packets.
func (t *MemTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout opens a stream to addr, failing at once when unreachable.
func (t *MemTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.isClosed() {
		return nil, fmt.Errorf("cluster: memnet: transport %s closed", t.addr)
	}
	return t.net.dial(t, addr, timeout)
}

// DialAddressTimeout opens a stream to addr.Addr.
func (t *MemTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(addr.Addr, timeout)
}

// StreamCh delivers accepted streams.
func (t *MemTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown detaches the transport, as memberlist does on shutdown.
func (t *MemTransport) Shutdown() error {
	t.close()
	return nil
}

func (t *MemTransport) isClosed() bool {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	return t.closed
}

func (t *MemTransport) close() {
	t.net.mu.Lock()
	t.closed = true
	conns := make([]*memConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.net.mu.Unlock()
	closeAll(conns)
}

// memConn is one end of an in-memory stream, with mem addresses.
type memConn struct {
	net.Conn
	net           *MemNetwork
	from, to      string
	local, remote memAddr
	owners        []*MemTransport
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) Close() error {
	c.net.mu.Lock()
	for _, t := range c.owners {
		delete(t.conns, c)
	}
	c.net.mu.Unlock()
	return c.Conn.Close()
}

// memAddr is an in-memory address (ip:port).
type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }
