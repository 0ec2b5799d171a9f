// The node's event loop: Subscribe, and the loop that on every backend
// change re-reads the committed table and the acting set (refresh),
// publishes ownership events, counts the workers running per shard and
// starts the handoffs of drained revoked shards.

package node

import (
	"context"
	"sort"
	"time"
)

// Subscribe returns a subscription to ownership events (see Event) with a
// buffer of buffer events (DefaultBuffer if < 1). It first delivers an
// OwnerChanged event for every currently owned shard and a ShardAcquired
// for every shard this node acts on, so a subscriber needs no separate
// initial read.
func (n *Node) Subscribe(buffer int) *Subscription[Event] {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.events.subscribe(buffer, nil)
	now := time.Now()
	for _, sh := range sortedShards(n.view) {
		v := n.view[sh]
		if v.owner != "" {
			s.send(Event{Kind: OwnerChanged, Shard: sh, Epoch: v.epoch, Owner: v.owner, At: now})
		}
		if v.acting {
			s.send(Event{Kind: ShardAcquired, Shard: sh, Epoch: v.epoch, Owner: v.owner, At: now})
		}
	}
	return s
}

// notify is the backend's change callback.
func (n *Node) notify() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// loop publishes events: it re-reads the committed table and the acting
// set on every change notification and at the earliest lease deadline.
func (n *Node) loop() {
	defer n.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := n.refresh(time.Now())
		n.publishLoad()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		wait := n.timing.RenewEvery
		if !next.IsZero() {
			if d := time.Until(next); d < wait {
				wait = max(d, 0)
			}
		}
		timer.Reset(wait)
		select {
		case <-n.done:
			return
		case <-n.kick:
		case <-timer.C:
		}
	}
}

// refresh diffs the current state against the last published view, emits
// events, starts handoffs of drained revoked shards and wakes waiters. It
// returns the earliest acting deadline.
func (n *Node) refresh(now time.Time) time.Time {
	n.refreshMu.Lock()
	defer n.refreshMu.Unlock()
	closed := n.isClosed()
	// Only the shards the ledger's change feed names since the last pass
	// can have changed owner, epoch or validity (a heartbeat, a renewal or
	// a lease running out changes none); acting can change only on the
	// shards this node owns. So a pass re-checks those two sets — the
	// whole table only when the feed cannot tell (the first pass, a
	// snapshot, a reader behind the bounded feed) or when closing.
	since := n.viewGen
	if closed {
		since = 0
	}
	gen, changed, full := n.be.shardsSince(since)
	full = full || since == 0 || gen == 0
	var recs, own []ShardInfo
	if full {
		recs = changed
		for _, rec := range recs {
			if rec.Owner == n.cfg.NodeID {
				own = append(own, rec)
			}
		}
	} else {
		recs, own = mergeChanged(n.ownRecs, changed, n.cfg.NodeID)
	}
	acting := make(map[uint32]Token)
	var next time.Time
	var drained []shardEpoch // revoked shards to hand over, in one go
	for _, rec := range own {
		if closed {
			break
		}
		if rec.Owner != n.cfg.NodeID {
			continue
		}
		tok, until, err := n.actingToken(rec.Shard, now)
		if err == nil && tok.Epoch != rec.Epoch {
			// The table changed between the two reads; the change's
			// notification triggers another refresh.
			continue
		}
		if err == nil {
			acting[rec.Shard] = tok
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		// Protocol-acting on a revoked shard: hand it over once no worker
		// runs on it any more (rule 5).
		if a, ok := n.be.acting(rec.Shard, now); ok && a.revoking {
			drained = append(drained, shardEpoch{rec.Shard, a.epoch})
			if d := a.until; next.IsZero() || d.Before(next) {
				next = d
			}
		}
	}

	n.startHandoffs(drained)

	var evs []Event
	n.mu.Lock()
	defer n.mu.Unlock()
	n.viewGen, n.ownRecs = gen, own
	if closed {
		n.viewGen = 0
	}
	for _, rec := range recs {
		old := n.view[rec.Shard]
		cur := shardView{epoch: rec.Epoch}
		if rec.State != ShardUnowned && rec.Valid {
			cur.owner = rec.Owner
		}
		if tok, ok := acting[rec.Shard]; ok {
			cur.acting, cur.epoch = true, tok.Epoch
		}
		evs = appendDiff(evs, rec.Shard, old, cur, now)
		n.view[rec.Shard] = cur
	}
	// A full pass put every shard of recs (each once) in the view: only
	// when the view holds more did a shard leave the table. Checked by
	// count, so the common pass builds no set and sorts nothing (it ran on
	// every ownership change, on every member).
	if full && len(n.view) > len(recs) {
		seen := make(map[uint32]bool, len(recs))
		for _, rec := range recs {
			seen[rec.Shard] = true
		}
		for _, sh := range sortedShards(n.view) {
			if !seen[sh] {
				evs = appendDiff(evs, sh, n.view[sh], shardView{}, now)
				delete(n.view, sh)
			}
		}
	}
	if full || len(changed) > 0 || len(evs) > 0 {
		n.shardFeed.add(&n.shardsGen, full, changed, evs)
	}
	if len(evs) > 0 {
		n.events.publish(evs...)
		n.publishElectionEvents(evs)
	}
	n.publishJobEvents()
	close(n.changed)
	n.changed = make(chan struct{})
	return next
}

// mergeChanged returns the records a pass re-checks — changed (the
// shards the ledger's feed names, sorted) and the shards self owned at the
// last pass (own, sorted), each once, changed's record first, sorted —
// and the records of the shards self owns now.
func mergeChanged(own, changed []ShardInfo, self string) (recs, nowOwn []ShardInfo) {
	recs = make([]ShardInfo, 0, len(own)+len(changed))
	nowOwn = make([]ShardInfo, 0, len(own)+1)
	i, j := 0, 0
	for i < len(own) || j < len(changed) {
		var rec ShardInfo
		switch {
		case j == len(changed) || (i < len(own) && own[i].Shard < changed[j].Shard):
			rec = own[i]
			i++
		default:
			if i < len(own) && own[i].Shard == changed[j].Shard {
				i++ // the changed record replaces the old one
			}
			rec = changed[j]
			j++
		}
		recs = append(recs, rec)
		if rec.Owner == self {
			nowOwn = append(nowOwn, rec)
		}
	}
	return recs, nowOwn
}

// shardEpoch is a shard at an ownership epoch.
type shardEpoch struct {
	shard uint32
	epoch uint64
}

// startHandoffs proposes the handoffs of revoked shards once no worker of
// this node runs on them, at most once per (shard, epoch). The shards that
// one refresh finds drained are handed over together — one proposal batch,
// one Raft entry — instead of one commit after another: a drain revokes
// every shard of the node at once, and each handoff is the successor's
// wait (docs/handoff.md).
func (n *Node) startHandoffs(cand []shardEpoch) {
	if len(cand) == 0 {
		return
	}
	n.mu.Lock()
	var start []shardEpoch
	for _, se := range cand {
		if n.active[se.shard] > 0 || n.handing[se.shard] == se.epoch {
			continue
		}
		n.handing[se.shard] = se.epoch
		start = append(start, se)
	}
	n.mu.Unlock()
	if len(start) == 0 {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.timing.DrainTimeout+n.timing.Lease)
		defer cancel()
		if err := n.be.handoff(ctx, start); err != nil {
			n.log.Warn("handoff failed; the control group takes the shards over after the drain timeout",
				"shards", len(start), "err", err)
		}
		n.notify()
	}()
}

// addActive and doneActive count the workers running on a shard; a revoked
// shard is handed over only when none runs.
func (n *Node) addActive(shard uint32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.active[shard]++
}

func (n *Node) doneActive(shard uint32) {
	n.mu.Lock()
	n.active[shard]--
	if n.active[shard] <= 0 {
		delete(n.active, shard)
	}
	n.mu.Unlock()
	n.notify()
}

func appendDiff(evs []Event, sh uint32, old, cur shardView, now time.Time) []Event {
	lost := old.acting && (!cur.acting || cur.epoch != old.epoch)
	acquired := cur.acting && (!old.acting || cur.epoch != old.epoch)
	if lost {
		evs = append(evs, Event{Kind: ShardLost, Shard: sh, Epoch: old.epoch, Owner: cur.owner, At: now})
	}
	if old.owner != cur.owner || (cur.owner != "" && old.epoch != cur.epoch) {
		evs = append(evs, Event{Kind: OwnerChanged, Shard: sh, Epoch: cur.epoch, Owner: cur.owner, Previous: old.owner, At: now})
	}
	if acquired {
		evs = append(evs, Event{Kind: ShardAcquired, Shard: sh, Epoch: cur.epoch, Owner: cur.owner, At: now})
	}
	return evs
}

func sortedShards[V any](m map[uint32]V) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
