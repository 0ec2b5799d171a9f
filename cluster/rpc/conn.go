package rpc

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/cluster/identity"
)

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
			return fmt.Errorf("%w: bad gob length prefix %#x", identity.ErrMessageTooLarge, b)
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
		return fmt.Errorf("%w: %d-byte message from %s, limit %d", identity.ErrMessageTooLarge, length, c.Conn.RemoteAddr(), c.max)
	}
	c.remaining = int(length)
	c.hdrPending = c.hdr[:n]
	return nil
}

// LogLimiter lets one log line through per interval: refused connections
// from a scanner or an attacker must not flood the log.
type LogLimiter struct {
	// Every is the interval.
	Every time.Duration
	last  atomic.Int64
}

func (l *LogLimiter) Allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(l.Every) && l.last.CompareAndSwap(last, now)
}

// NewCheckedDialer wraps stream so that every connection it dials proves
// its server with check (cluster's ControlGroup: the node gossip says
// listens at that address) and against the deny-list revoked (nil: none).
func NewCheckedDialer(stream StreamLayer, check func(ctx context.Context, addr string, c net.Conn) (identity.Peer, error), revoked *identity.Revocation) StreamLayer {
	return &checkedDialer{StreamLayer: stream, check: check, revoked: revoked}
}

// checkedDialer verifies, on every connection this node dials, that the
// server is the node gossip says listens at that address: a member's
// certificate cannot stand in for another member's Raft address.
type checkedDialer struct {
	StreamLayer
	check   func(ctx context.Context, addr string, c net.Conn) (identity.Peer, error)
	revoked *identity.Revocation // the deny-list (identity/revoke.go)
}

func (d *checkedDialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := d.StreamLayer.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	p, err := d.check(ctx, addr, c)
	if err == nil {
		err = d.revoked.Check(c, p)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &provenConn{Conn: d.revoked.Wrap(c, p), peer: p}, nil
}

// provenConn is a dialed connection whose server proved who it is.
type provenConn struct {
	net.Conn
	peer identity.Peer
}
