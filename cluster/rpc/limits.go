package rpc

import (
	"bufio"
	"encoding/gob"
	"io"
	"net"
	netrpc "net/rpc"
	"sync"

	"github.com/tenurehq/tenure/cluster/identity"
)

// Limits before authentication on the Raft/RPC port (docs/security.md,
// issue 25). An accepted connection is "pending" until it has proven its
// peer (the TLS handshake, bounded by authTimeout) and sent its protocol
// byte (protoReadTimeout); pending connections are capped per port and per
// source address, so a flood of idle connections costs the node a bounded
// number of goroutines and never starves authenticated traffic, which runs
// on connections established before. Past authentication, each RPC
// connection has a bounded number of requests in flight. Every refusal
// counts in tenure_control_conn_refused_total{reason}.
const (
	// DefaultMaxPendingConns caps the pending connections of one port.
	DefaultMaxPendingConns = 512
	// DefaultMaxPendingPerSource caps the pending connections from one
	// source IP. Loopback sources count only against the port's cap (a
	// test or a one-machine cluster connects from 127.0.0.1 only).
	DefaultMaxPendingPerSource = 32
	// DefaultMaxInflightRPCs bounds the requests in flight on one RPC
	// connection; the next is read only once one is answered (TCP pushes
	// back on the sender).
	DefaultMaxInflightRPCs = 128
)

// pendingLimiter counts pending connections per port and per source.
type pendingLimiter struct {
	max, maxPerSource int

	mu    sync.Mutex
	total int
	bySrc map[string]int
}

func newPendingLimiter(max, perSource int) *pendingLimiter {
	return &pendingLimiter{max: max, maxPerSource: perSource, bySrc: map[string]int{}}
}

// acquire takes a pending slot for a connection from addr; it returns the
// release function, or the refusal's reason.
func (l *pendingLimiter) acquire(addr net.Addr) (release func(), reason string) {
	src := addr.String()
	loopback := false
	if ta, ok := addr.(*net.TCPAddr); ok {
		src, loopback = ta.IP.String(), ta.IP.IsLoopback()
	} else if h, _, err := net.SplitHostPort(src); err == nil {
		src = h
		ip := net.ParseIP(h)
		loopback = ip != nil && ip.IsLoopback()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.total >= l.max:
		return nil, "pending_per_port"
	case !loopback && l.maxPerSource > 0 && l.bySrc[src] >= l.maxPerSource:
		return nil, "pending_per_source"
	}
	l.total++
	l.bySrc[src]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.bySrc[src]--; l.bySrc[src] <= 0 {
				delete(l.bySrc, src)
			}
		})
	}, ""
}

// gobServerCodec is net/rpc's wire format (gob, one header then one body
// per message) with at most max requests in flight: ReadRequestHeader
// waits for a free slot, WriteResponse frees one.
type gobServerCodec struct {
	rwc  io.ReadWriteCloser
	dec  *gob.Decoder
	enc  *gob.Encoder
	buf  *bufio.Writer
	slot chan struct{}
	once sync.Once
	done chan struct{}
}

func newGobServerCodec(rwc io.ReadWriteCloser, max int) *gobServerCodec {
	buf := bufio.NewWriter(rwc)
	return &gobServerCodec{rwc: rwc, dec: gob.NewDecoder(rwc), enc: gob.NewEncoder(buf), buf: buf,
		slot: make(chan struct{}, max), done: make(chan struct{})}
}

func (c *gobServerCodec) ReadRequestHeader(r *netrpc.Request) error {
	select {
	case c.slot <- struct{}{}:
	default:
		identity.CountRefusal("inflight_rpcs") // counted once per wait
		select {
		case c.slot <- struct{}{}:
		case <-c.done:
			return io.EOF
		}
	}
	if err := c.dec.Decode(r); err != nil {
		<-c.slot // no response follows a header that did not decode
		return err
	}
	return nil
}

func (c *gobServerCodec) ReadRequestBody(body any) error { return c.dec.Decode(body) }

// WriteResponse is called once per request header read (net/rpc answers
// even requests it cannot serve), one call at a time.
func (c *gobServerCodec) WriteResponse(r *netrpc.Response, body any) error {
	defer func() { <-c.slot }()
	err := c.enc.Encode(r)
	if err == nil {
		err = c.enc.Encode(body)
	}
	if err == nil {
		err = c.buf.Flush()
	}
	if err != nil {
		_ = c.Close() // the stream is broken mid-message
	}
	return err
}

func (c *gobServerCodec) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.rwc.Close()
}
