package commit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/ledger"
)

// Applier commits one encoded command (possibly a ledger.Batch) and returns its
// ledger.Result. An error means the outcome is unknown or the command was not
// proposed (e.g. raft.ErrNotLeader, raft.ErrLeadershipLost); every ledger
// command is a compare-and-set, so retrying it is safe.
type Applier interface {
	Apply(ctx context.Context, data []byte) (ledger.Result, error)
}

// RaftApplier applies through a local raft instance (the leader).
type RaftApplier struct {
	Raft *raft.Raft
	// Timeout bounds how long Apply waits to enqueue the entry when ctx has
	// no deadline (0: wait forever).
	Timeout time.Duration
}

// Apply implements Applier. The wait for the commit is not interrupted by
// ctx (raft has no cancel); ctx's deadline bounds the enqueue.
func (a RaftApplier) Apply(ctx context.Context, data []byte) (ledger.Result, error) {
	timeout := a.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	f := a.Raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return ledger.Result{}, err
	}
	r, ok := f.Response().(ledger.Result)
	if !ok {
		return ledger.Result{}, fmt.Errorf("commit: raft returned %T, not a ledger.Result (is the FSM a *ledger.FSM?)", f.Response())
	}
	return r, nil
}

// BatcherConfig configures a Batcher. Zero values take the defaults.
type BatcherConfig struct {
	// MaxCommands bounds the commands in one log entry.
	MaxCommands int
	// MaxBytes bounds one log entry's encoded size.
	MaxBytes int
	// MaxInFlight bounds how many entries are being committed at once.
	// While all slots are busy, arriving commands queue and go out together
	// in the next entry (group commit without a timer).
	MaxInFlight int
	// Linger, if positive, waits this long after the first command of an
	// entry for more to arrive. 0 (the default) relies on natural batching.
	Linger time.Duration
	// QueueSize bounds the Apply and ApplyAll calls waiting for a slot;
	// beyond it they block.
	QueueSize int
}

// Batcher defaults.
const (
	DefaultBatchMaxCommands = 512
	DefaultBatchMaxBytes    = 1 << 20
	DefaultBatchInFlight    = 1
	DefaultBatchQueueSize   = 4096
)

func (c *BatcherConfig) fill() error {
	for _, d := range []struct {
		field *int
		def   int
	}{
		{&c.MaxCommands, DefaultBatchMaxCommands}, {&c.MaxBytes, DefaultBatchMaxBytes},
		{&c.MaxInFlight, DefaultBatchInFlight}, {&c.QueueSize, DefaultBatchQueueSize},
	} {
		if *d.field == 0 {
			*d.field = d.def
		}
	}
	switch {
	case c.MaxCommands < 1 || c.MaxCommands > ledger.MaxBatchEntries:
		return fmt.Errorf("commit: batcher MaxCommands %d must be in [1, %d]", c.MaxCommands, ledger.MaxBatchEntries)
	case c.MaxBytes < 1 || c.MaxBytes > ledger.MaxCommandSize:
		return fmt.Errorf("commit: batcher MaxBytes %d must be in [1, %d]", c.MaxBytes, ledger.MaxCommandSize)
	case c.MaxInFlight < 1:
		return fmt.Errorf("commit: batcher MaxInFlight %d must be positive", c.MaxInFlight)
	case c.Linger < 0:
		return fmt.Errorf("commit: batcher Linger %v must not be negative", c.Linger)
	case c.QueueSize < 1:
		return fmt.Errorf("commit: batcher QueueSize %d must be positive", c.QueueSize)
	}
	return nil
}

type batchReq struct {
	ctx  context.Context
	cmd  ledger.Command
	ver  byte   // the encoding version of body
	body []byte // encoded command without the version byte
	done chan batchResp
}

type batchResp struct {
	r   ledger.Result
	err error
}

// Batcher groups concurrent commands into ledger.Batch log entries (group commit)
// and hands each caller its own ledger.Result. Safe for concurrent use.
type Batcher struct {
	a       Applier
	cfg     BatcherConfig
	reqs    chan []batchReq // one Apply, or one ApplyAll's commands together
	slots   chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	closeMu sync.RWMutex
	closed  bool
	wg      sync.WaitGroup
}

// NewBatcher starts a batcher over a. Close it to stop its goroutine.
func NewBatcher(a Applier, cfg BatcherConfig) (*Batcher, error) {
	if a == nil {
		return nil, fmt.Errorf("commit: NewBatcher with nil Applier")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Batcher{a: a, cfg: cfg, reqs: make(chan []batchReq, cfg.QueueSize),
		slots: make(chan struct{}, cfg.MaxInFlight), ctx: ctx, cancel: cancel}
	b.wg.Add(1)
	go b.loop()
	return b, nil
}

// Apply commits c, possibly together with other commands, and returns its
// ledger.Result. On error (including ctx ending first) the outcome is unknown:
// the command may still be committed. Batches cannot be nested: c must not
// be a ledger.Batch.
func (b *Batcher) Apply(ctx context.Context, c ledger.Command) (ledger.Result, error) {
	req, err := b.enqueue(ctx, c)
	if err != nil {
		return ledger.Result{}, err
	}
	return req.wait(ctx)
}

// ApplyAll is Apply for several commands that must commit in the given
// order (a planner round: an ExpireNode before the grants it makes
// possible; a node's handoffs). They enter the queue together and in
// order, so they go out in as few entries as MaxCommands and MaxBytes
// allow — one, usually — with no other caller's command between them;
// entries commit in order while MaxInFlight is 1 (the default). Each
// command gets its own ledger.Result and error, with Apply's meaning.
func (b *Batcher) ApplyAll(ctx context.Context, cmds []ledger.Command) ([]ledger.Result, []error) {
	res, errs := make([]ledger.Result, len(cmds)), make([]error, len(cmds))
	group := make([]batchReq, 0, len(cmds))
	idx := make([]int, 0, len(cmds)) // group[k] is cmds[idx[k]]
	for i, c := range cmds {
		req, err := b.encodeReq(ctx, c)
		if err != nil {
			errs[i] = err
			continue
		}
		group, idx = append(group, req), append(idx, i)
	}
	if len(group) == 0 {
		return res, errs
	}
	if err := b.send(ctx, group); err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return res, errs
	}
	for k, i := range idx {
		res[i], errs[i] = group[k].wait(ctx)
	}
	return res, errs
}

// enqueue encodes c and queues it for the next entry.
func (b *Batcher) enqueue(ctx context.Context, c ledger.Command) (*batchReq, error) {
	req, err := b.encodeReq(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := b.send(ctx, []batchReq{req}); err != nil {
		return nil, err
	}
	return &req, nil
}

// encodeReq encodes c as a request, not yet queued.
func (b *Batcher) encodeReq(ctx context.Context, c ledger.Command) (batchReq, error) {
	body, ver, err := ledger.EncodeEntry(c, 0)
	if err != nil {
		return batchReq{}, err
	}
	if len(body)+16 > b.cfg.MaxBytes {
		return batchReq{}, fmt.Errorf("%w: command of %d bytes exceeds batch MaxBytes %d", ledger.ErrTooLarge, len(body), b.cfg.MaxBytes)
	}
	return batchReq{ctx: ctx, cmd: c, ver: ver, body: body, done: make(chan batchResp, 1)}, nil
}

// send queues a group of requests (in order, together).
func (b *Batcher) send(ctx context.Context, group []batchReq) error {
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed {
		return ledger.ErrClosed
	}
	select {
	case b.reqs <- group:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait returns the outcome of a queued request.
func (r *batchReq) wait(ctx context.Context) (ledger.Result, error) {
	select {
	case resp := <-r.done:
		return resp.r, resp.err
	case <-ctx.Done():
		return ledger.Result{}, ctx.Err()
	}
}

// ApplyEncoded is Apply for a command already in wire form (e.g. forwarded
// from a follower over RPC). A ledger.Batch is unpacked and its commands applied
// (and grouped with others) individually, in the batch's order, as
// ApplyAll does: a follower's batch carries a planner round (an expiry
// before the grants it makes possible), which must commit in the order it
// was sent. The result then has one entry per command; any command's
// error is returned instead.
func (b *Batcher) ApplyEncoded(ctx context.Context, data []byte) (ledger.Result, error) {
	c, err := ledger.Decode(data)
	if err != nil {
		return ledger.Result{}, err
	}
	batch, ok := c.(ledger.Batch)
	if !ok {
		return b.Apply(ctx, c)
	}
	res, errs := b.ApplyAll(ctx, batch.Commands)
	for _, err := range errs {
		if err != nil {
			return ledger.Result{}, err
		}
	}
	out := ledger.Result{Results: res}
	for _, r := range res {
		out.Index = max(out.Index, r.Index)
	}
	return out, nil
}

// Close stops the batcher: later Apply calls fail with ledger.ErrClosed; commands
// already queued are still proposed. It waits for in-flight entries.
func (b *Batcher) Close() error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	close(b.reqs)
	b.closeMu.Unlock()
	b.wg.Wait()
	b.cancel()
	return nil
}

func (b *Batcher) loop() {
	defer b.wg.Done()
	var pending []batchReq // the rest of a group that did not fit the last entry
	for {
		var first []batchReq
		if len(pending) > 0 {
			first, pending = pending, nil
		} else {
			g, ok := <-b.reqs
			if !ok {
				return
			}
			first = g
		}
		b.slots <- struct{}{} // wait for an in-flight slot; commands queue meanwhile
		var batch []batchReq
		size := 8
		// add takes g's requests while they fit the entry and returns the
		// rest. The first request always fits (enqueue checked its size).
		add := func(g []batchReq) []batchReq {
			for i, r := range g {
				if len(batch) > 0 && (len(batch) == b.cfg.MaxCommands || size+len(r.body)+8 > b.cfg.MaxBytes) {
					return g[i:]
				}
				size += len(r.body) + 8
				batch = append(batch, r)
			}
			return nil
		}
		pending = add(first)
		var linger <-chan time.Time
		var timer *time.Timer
		if b.cfg.Linger > 0 {
			timer = time.NewTimer(b.cfg.Linger)
			linger = timer.C
		}
		closed := false
	gather:
		for len(pending) == 0 && len(batch) < b.cfg.MaxCommands {
			var g []batchReq
			var ok bool
			if linger != nil {
				select {
				case g, ok = <-b.reqs:
				case <-linger:
					break gather
				}
			} else {
				select {
				case g, ok = <-b.reqs:
				default:
					break gather
				}
			}
			if !ok {
				closed = true
				break
			}
			pending = add(g)
		}
		if timer != nil {
			timer.Stop()
		}
		b.wg.Add(1)
		go b.dispatch(batch)
		if closed {
			return
		}
	}
}

func (b *Batcher) dispatch(batch []batchReq) {
	defer b.wg.Done()
	defer func() { <-b.slots }()
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.done <- batchResp{err: r.ctx.Err()}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// One version for the entry: the newest any command needs (rare; the
	// others are re-encoded at it).
	var ver byte
	for _, r := range live {
		ver = max(ver, r.ver)
	}
	bodies := make([][]byte, len(live))
	for i, r := range live {
		if r.ver != ver {
			live[i].body, _, _ = ledger.EncodeEntry(r.cmd, ver) // encoded once already: cannot fail
		}
		bodies[i] = live[i].body
	}
	ctx, cancel := entryContext(b.ctx, live)
	res, err := b.a.Apply(ctx, ledger.JoinEntry(ver, bodies))
	cancel()
	for i, r := range live {
		switch {
		case err != nil:
			r.done <- batchResp{err: err}
		case len(live) == 1:
			r.done <- batchResp{r: res}
		case res.Err != nil:
			r.done <- batchResp{r: ledger.Result{Err: res.Err, Index: res.Index}}
		case len(res.Results) != len(live):
			r.done <- batchResp{err: fmt.Errorf("commit: batch of %d commands returned %d results", len(live), len(res.Results))}
		default:
			r.done <- batchResp{r: res.Results[i]}
		}
	}
}

// entryContext bounds the commit of one entry by its commands' contexts:
// it carries the latest of their deadlines (when every one has a deadline)
// and ends once every command's context has ended. Without it an entry
// forwarded to a leader that vanished without closing its connections
// (a dead host sends no RST) would hold its in-flight slot until Close,
// and every later command — node heartbeats included — would queue behind
// it. Ending the commit early is safe: every caller has already given up
// and treats the outcome as unknown.
func entryContext(parent context.Context, live []batchReq) (context.Context, context.CancelFunc) {
	var latest time.Time
	all := true
	for _, r := range live {
		d, ok := r.ctx.Deadline()
		if !ok {
			all = false
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithCancel(parent)
	if all {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
		parentCancel := cancel
		cancel = func() { cancelDeadline(); parentCancel() }
	}
	var remaining atomic.Int64
	remaining.Store(int64(len(live)))
	stops := make([]func() bool, len(live))
	for i, r := range live {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if remaining.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
