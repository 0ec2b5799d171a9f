package node

// The handoff on the old owner's word (cluster version 6:
// ownership/word.go, docs/guarantees.md). As the control-group leader
// this node keeps the Transfers old owners tell it — over the RPC port,
// the sender proven by its certificate (cluster.ControlConfig.OwnerWord),
// or its own — for their targets, and answers each target's
// ask for words (Control.Words, a long poll) with the bound its planner
// gives after receipt (leaderLoop.WordValid). As a target it
// sends the asks its agent wants (ownership.Ready.WordAsk) and steps the
// answers in.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// wordRelay holds the Transfers received for each target until its ask.
type wordRelay struct {
	mu    sync.Mutex
	queue map[string][]ledger.Transfer
	wake  map[string]chan struct{}
}

// maxQueuedWords bounds the Transfers held for one target.
const maxQueuedWords = 4096

// add keeps tf for its target (once per shard and epoch) and wakes the
// target's ask.
func (r *wordRelay) add(tf ledger.Transfer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queue == nil {
		r.queue, r.wake = map[string][]ledger.Transfer{}, map[string]chan struct{}{}
	}
	q := r.queue[tf.To]
	for _, old := range q {
		if old.Shard == tf.Shard && old.Epoch == tf.Epoch {
			return
		}
	}
	if len(q) >= maxQueuedWords {
		return
	}
	r.queue[tf.To] = append(q, tf)
	if ch := r.wake[tf.To]; ch != nil {
		close(ch)
		delete(r.wake, tf.To)
	}
}

// wait returns the Transfers held for node, waiting up to hold (or ctx)
// for one when there is none. A newer ask of the same node ends an older
// one's wait.
func (r *wordRelay) wait(ctx context.Context, node string, hold time.Duration) []ledger.Transfer {
	r.mu.Lock()
	if r.queue == nil {
		r.queue, r.wake = map[string][]ledger.Transfer{}, map[string]chan struct{}{}
	}
	if q := r.queue[node]; len(q) > 0 {
		delete(r.queue, node)
		r.mu.Unlock()
		return q
	}
	if old := r.wake[node]; old != nil {
		close(old)
	}
	ch := make(chan struct{})
	r.wake[node] = ch
	r.mu.Unlock()
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake[node] == ch {
		delete(r.wake, node)
	}
	q := r.queue[node]
	delete(r.queue, node)
	return q
}

// transfersOf returns the Transfers in c (a Batch's, a Session's).
func transfersOf(c ledger.Command, out []ledger.Transfer) []ledger.Transfer {
	switch c := c.(type) {
	case ledger.Transfer:
		return append(out, c)
	case ledger.Session:
		return transfersOf(c.Command, out)
	case ledger.Batch:
		for _, sc := range c.Commands {
			out = transfersOf(sc, out)
		}
	}
	return out
}

// ownerWord is cluster.ControlConfig.OwnerWord: an old owner's word told
// to this node as leader (Control.OwnerWord), cmd its Transfers. They are
// kept as their senders' words when the sender is proven to be their From
// (relayable) and the replica runs version 6.
func (b *netBackend) ownerWord(p cluster.Peer, authenticated bool, cmd []byte) {
	if !b.fsm.State().VersionActive(ledger.VersionHandoffWords) {
		return
	}
	c, err := ledger.Decode(cmd)
	if err != nil {
		return
	}
	st := b.fsm.State()
	for _, tf := range transfersOf(c, nil) {
		if !relayable(p, authenticated, tf) {
			continue
		}
		kept := b.keepWord(st, tf)
		b.debug("words: told", "shard", tf.Shard, "epoch", tf.Epoch, "from", tf.From, "to", tf.To, "kept", kept)
	}
}

// relayable reports whether a Transfer told by p may be relayed as its
// From's word: only when an authenticated connection (TLS) proved the
// sender is that node. Without TLS nothing proves it, and a forged word
// would let its target act while the owner still does: the move goes by
// the commit.
func relayable(p cluster.Peer, authenticated bool, tf ledger.Transfer) bool {
	return (authenticated || mutation.On(mutation.WordsUnauthenticated)) && !p.IsOperator() &&
		(p.ID == tf.From || mutation.On(mutation.WordFromAnyone))
}

// keepWord keeps tf for its target when the leader's replica shows the
// shard Revoking from tf.From toward tf.To at tf.Epoch (so the relay holds
// words only for real moves: at most one per shard).
func (b *netBackend) keepWord(st *ledger.State, tf ledger.Transfer) bool {
	rec, ok := st.Shard(tf.Shard)
	if !ok || rec.State != ledger.ShardRevoking || rec.Owner != tf.From || rec.Target != tf.To || rec.Epoch != tf.Epoch {
		return false
	}
	b.relay.add(tf)
	return true
}

// tellWords tells the leader this node's word for the Transfers in cmds
// (cluster version 6) as the agent proposes them: as leader it keeps its
// own (a leader's proposals do not cross the RPC port); else it sends
// them on their own (Control.OwnerWord), beside their commit — which
// waits behind this node's in-flight entry, a whole fsync'd round under
// load. A word lost on the way costs only time: the target acts on the
// commit.
func (b *netBackend) tellWords(cmds []ledger.Command) {
	if !b.fsm.State().VersionActive(ledger.VersionHandoffWords) {
		return
	}
	var tfs []ledger.Command
	for _, c := range cmds {
		for _, tf := range transfersOf(c, nil) {
			if tf.From == b.id {
				tfs = append(tfs, tf)
			}
		}
	}
	if len(tfs) == 0 {
		return
	}
	if b.ctl.Leader() == b.id {
		st := b.fsm.State()
		for _, c := range tfs {
			tf := c.(ledger.Transfer)
			kept := b.keepWord(st, tf)
			b.debug("words: own Transfer", "shard", tf.Shard, "epoch", tf.Epoch, "to", tf.To, "kept", kept)
		}
		return
	}
	var word ledger.Command = ledger.Batch{Commands: tfs}
	if len(tfs) == 1 {
		word = tfs[0]
	}
	data, err := ledger.Encode(word)
	if err != nil {
		return
	}
	b.goLoop(func() {
		ctx, cancel := context.WithTimeout(b.ctx, b.timing.RenewEvery)
		defer cancel()
		err := b.ctl.SendOwnerWord(ctx, data)
		b.debug("words: sent", "transfers", len(tfs), "err", err)
	})
}

// serveWords is cluster.ControlConfig.Words: node's ask, on the leader.
func (b *netBackend) serveWords(ctx context.Context, node string) ([]byte, error) {
	if !b.fsm.State().VersionActive(ledger.VersionHandoffWords) {
		return nil, cluster.ErrWordsUnsupported
	}
	loop := b.loopReady.Load()
	if loop == nil {
		return nil, ownership.ErrNotLeader
	}
	start := time.Now()
	tfs := b.relay.wait(ctx, node, ownership.WordHold(b.ocfg))
	now := time.Now() // after receipt: the bound is read now
	words := []ownership.Word{}
	for _, tf := range tfs {
		// The record is read under the loop's lock (leaderLoop.WordValid):
		// read before it, a round could observe a newer table in between.
		shard := func() (ledger.ShardRecord, bool) {
			rec, _ := b.fsm.State().Shard(tf.Shard)
			return rec, rec.Epoch == tf.Epoch
		}
		if d, ok := loop.WordValid(now, shard, tf.From, tf.To); ok {
			words = append(words, ownership.Word{Shard: tf.Shard, Epoch: tf.Epoch, From: tf.From, To: tf.To, Valid: d})
		}
	}
	if len(tfs) > 0 {
		b.debug("words: answering an ask", "node", node, "held", len(tfs), "words", len(words), "waited", now.Sub(start))
	}
	if len(words) == 0 {
		return noWords, nil // answered without a confirm round (cluster.ControlConfig.NoWords)
	}
	return json.Marshal(words)
}

// noWords is serveWords' answer that relays nothing.
var noWords = []byte("[]")

// askWords sends one ask for words the agent wants and steps the answer
// in.
func (b *netBackend) askWords(ask ownership.WordAsk) {
	ctx, cancel := context.WithTimeout(b.ctx, 2*ownership.WordHold(b.ocfg)+b.timing.RenewEvery)
	defer cancel()
	start := time.Now()
	data, err := b.ctl.Words(ctx, ask.Node)
	var words []ownership.Word
	if err == nil {
		if derr := json.Unmarshal(data, &words); derr != nil {
			err = fmt.Errorf("node: decode the leader's words: %w", derr)
		}
	}
	if len(words) > ownership.MaxHeldWords {
		words = words[:ownership.MaxHeldWords]
	}
	if err != nil {
		b.debug("words: ask failed", "err", err, "asked", time.Since(start))
		// Back off a little (the agent retries after RenewEvery/4).
		b.step(time.Now(), ownership.WordOutcome{Token: ask.Token, Err: err})
		return
	}
	if len(words) > 0 {
		b.debug("words: received", "words", len(words), "shard", words[0].Shard, "epoch", words[0].Epoch, "asked", time.Since(start))
	}
	b.step(time.Now(), ownership.WordOutcome{Token: ask.Token, Words: words})
	b.notify()
}

// debug logs a trace line of the handoff on a word (debug level).
func (b *netBackend) debug(msg string, args ...any) {
	if b.cfg.Logger != nil {
		b.cfg.Logger.Debug(msg, args...)
	}
}
