package rpc

import (
	"context"
	"errors"
	netrpc "net/rpc"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed: the pool (the control group that owns it) is closed.
var ErrClosed = errors.New("cluster: control group closed")

// Pool keeps one net/rpc client per remote address; net/rpc multiplexes
// concurrent calls on it. A peer whose host vanished (no TCP reset: its
// SYNs and segments are dropped) must not make calls wait on it longer
// than their own deadlines, nor cost a fresh dial per call: at most one
// dial per address is in flight (bounded by DialTimeout, shared by the
// callers that wait for it, each within its own ctx), and a connection is
// dropped only once it has been silent — requests out, no reply — for
// SilentDrop, not whenever one caller stops waiting (a confirm round
// stops waiting for the slower voters as soon as it has its quorum).
type Pool struct {
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
	// DialTimeout bounds one dial of a control RPC connection: long
	// enough for a TLS handshake on a loaded machine and for one SYN
	// retransmission (1 s) to a host that just came back.
	DialTimeout = 2 * time.Second
	// SilentDrop: a connection with calls out and no reply for this
	// long is taken for wedged (a vanished host) once a call on it gives
	// up. Control RPCs are answered in milliseconds, except forwarded
	// commands and confirm-age queries that wait for Raft (up to their
	// deadlines); those share the connection with the frequent renewals
	// and confirms, whose replies keep it from counting as silent.
	SilentDrop = time.Second
)

// poolDial is a dial in flight; done closes when it ends.
type poolDial struct {
	done chan struct{}
	c    *pooledClient
	err  error
}

type pooledClient struct {
	*netrpc.Client
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

func NewPool(stream StreamLayer, maxMessage int) *Pool {
	ctx, stop := context.WithCancel(context.Background())
	return &Pool{stream: stream, maxMessage: maxMessage, dialTimeout: DialTimeout, silentDrop: SilentDrop,
		conns: map[string]*pooledClient{}, dials: map[string]*poolDial{}, ctx: ctx, stop: stop}
}

// DialError marks a call that never reached the peer: safe to retry.
type DialError struct{ Err error }

func (e *DialError) Error() string { return "dial: " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// IsDialError reports whether err is (or wraps) a *DialError: the request
// never reached the peer.
func IsDialError(err error) bool {
	var d *DialError
	return errors.As(err, &d)
}

// client returns the pooled client for addr, dialing it if there is none:
// the first caller starts the dial, later ones wait for the same dial,
// each within its ctx.
func (p *Pool) client(ctx context.Context, addr string) (*pooledClient, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
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
		return nil, &DialError{ctx.Err()}
	}
}

// dial connects to addr for everyone waiting on d.
func (p *Pool) dial(addr string, d *poolDial) {
	defer p.wg.Done()
	c, err := p.connect(addr)
	p.mu.Lock()
	delete(p.dials, addr)
	switch {
	case err != nil:
	case p.closed:
		c.closedByUs.Store(true)
		_ = c.Close()
		err = ErrClosed
	default:
		p.conns[addr] = c
	}
	p.mu.Unlock()
	if err != nil {
		d.err = err
		if !errors.Is(err, ErrClosed) {
			d.err = &DialError{err}
		}
	}
	d.c = c
	close(d.done)
}

func (p *Pool) connect(addr string) (*pooledClient, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	defer cancel()
	conn, err := p.stream.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(p.dialTimeout))
	if _, err := conn.Write([]byte{ProtoRPC}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	lc := newGobLimitConn(conn, p.maxMessage, 0, DefaultRPCMessageTimeout)
	return &pooledClient{Client: netrpc.NewClient(&writeDeadlineConn{Conn: lc, timeout: rpcWriteTimeout})}, nil
}

func (p *Pool) drop(addr string, c *pooledClient) {
	p.mu.Lock()
	if p.conns[addr] == c {
		delete(p.conns, addr)
	}
	p.mu.Unlock()
	c.closedByUs.Store(true)
	_ = c.Close()
}

// call performs one RPC bounded by ctx. A *DialError error means the request
// was never sent. A context error means the outcome is unknown.
func (p *Pool) Call(ctx context.Context, addr, method string, args, reply any) error {
	c, err := p.client(ctx, addr)
	if err != nil {
		return err
	}
	// Go writes the request synchronously (bounded by rpcWriteTimeout); run
	// it aside so ctx is honoured even while a write is stuck. The
	// goroutine sees the call end even after the caller gave up, so a late
	// reply still counts as the peer being heard.
	//
	// net/rpc decodes the answer into the value it was given whenever the
	// answer comes, also after the caller gave up (ctx) and went on to read
	// or reuse its reply. So the call decodes into a fresh value of reply's
	// type, copied into reply only when the caller takes the outcome.
	fresh := freshReply(reply)
	done := make(chan *netrpc.Call, 1)
	c.sent(time.Now())
	go func() {
		call := <-c.Go(method, args, fresh, make(chan *netrpc.Call, 1)).Done
		c.ended(time.Now(), heardFrom(call.Error))
		done <- call
	}()
	select {
	case call := <-done:
		if heardFrom(call.Error) {
			if call.Error == nil && fresh != reply {
				reflect.ValueOf(reply).Elem().Set(reflect.ValueOf(fresh).Elem())
			}
			return call.Error
		}
		// Connection-level failure: the client is unusable. net/rpc
		// reports ErrShutdown without sending when the connection had
		// already died by itself; if we closed it, a request may have
		// gone out, so the outcome is unknown.
		unsent := errors.Is(call.Error, netrpc.ErrShutdown) && !c.closedByUs.Load()
		p.drop(addr, c)
		if unsent {
			return &DialError{call.Error}
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

// freshReply returns a new zero value of the type reply points to (reply
// itself when it is not a non-nil pointer: net/rpc refuses those anyway).
func freshReply(reply any) any {
	v := reflect.ValueOf(reply)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return reply
	}
	return reflect.New(v.Type().Elem()).Interface()
}

// heardFrom reports whether a call's outcome came from the peer: a reply,
// or an error the server returned.
func heardFrom(err error) bool {
	var se netrpc.ServerError
	return err == nil || errors.As(err, &se)
}

func (p *Pool) Close() {
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
