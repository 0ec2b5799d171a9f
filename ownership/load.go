package ownership

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ring"
)

// This file holds load-aware placement: once the count placement is
// settled, the leader moves load off a hot member with a swap
// (ring.LoadSwap), within Config.Load's budget.

// loadSwap returns the two Revokes of a load swap, or nil. It is called
// after the round's count placement proposed nothing, with nothing in
// flight. A swap needs: load balancing on, every ring member reporting
// its load, the placement settled (every partition validly Owned where
// ring.Assign wants it) for Load.Settle and Load.Settle since the last
// swap, fewer than Load.SwapsPerMinute swaps in the last minute, and room
// for two moves in the churn budget. Both moves are planned handoffs; a
// valid Revoking shard counts at its target (buildRing), so once both are
// committed ring.Assign's target is the swapped placement and neither
// move is undone.
func (p *Planner) loadSwap(now time.Time, t table, inFlight int, settled bool) []ledger.Command {
	cfg := p.cfg.Load
	if !settled {
		p.unsettledAt = now
	}
	if cfg.Threshold <= 0 || !settled || inFlight > 0 || p.cfg.MaxMovesInFlight < 2 || len(p.ringKey) < 2 {
		return nil
	}
	if now.Sub(p.unsettledAt) < cfg.Settle {
		return nil
	}
	recent := p.swapsAt[:0]
	for _, at := range p.swapsAt {
		if now.Sub(at) < time.Minute {
			recent = append(recent, at)
		}
	}
	p.swapsAt = recent
	if len(recent) >= cfg.SwapsPerMinute || (len(recent) > 0 && now.Sub(recent[len(recent)-1]) < cfg.Settle) {
		return nil
	}
	v := ring.LoadView{Owners: p.assign, Members: p.ringKey, Totals: map[string]float64{}, Hot: map[string][]ring.ShardLoad{},
		Threshold: cfg.Threshold, MinGain: cfg.MinGain}
	for _, m := range p.ringKey {
		lr := t.groups.load[m]
		if lr == nil {
			return nil // a member that reports no load: nothing to compare
		}
		v.Totals[m], v.Hot[m] = lr.Total, lr.Hot
		if w := t.groups.weight[m]; w > 1 {
			if v.Weights == nil {
				v.Weights = map[string]int{}
			}
			v.Weights[m] = min(w, ring.MaxWeight)
		}
	}
	if len(t.pins) > 0 {
		v.Fixed = make([]bool, len(p.assign))
		for s := range t.pins {
			if int(s) < len(v.Fixed) {
				v.Fixed[s] = true
			}
		}
	}
	sw, ok := ring.LoadSwap(v)
	if !ok {
		return nil
	}
	hot, back := t.shard(sw.Hot), t.shard(sw.Back)
	ts := now.UnixNano()
	p.swapsAt = append(p.swapsAt, now)
	p.lastSwap = sw
	reason := fmt.Sprintf("load to %s (%s at %.2f× its share)", sw.To, sw.From, sw.MaxBefore)
	out := []ledger.Command{
		ledger.Revoke{Shard: sw.Hot, Epoch: hot.Epoch, Target: sw.To, Now: ts, Reason: reason},
		ledger.Revoke{Shard: sw.Back, Epoch: back.Epoch, Target: sw.From, Now: ts, Reason: fmt.Sprintf("load swap to %s for s%d", sw.From, sw.Hot)},
	}
	if sw.Back < sw.Hot {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// settled reports whether every partition is validly Owned by the owner
// ring.Assign chose this round.
func (p *Planner) settled(t table) bool {
	if len(p.assign) == 0 {
		return false
	}
	for s, want := range p.assign {
		rec := t.shard(uint32(s))
		if rec.State != ledger.ShardOwned || !t.valid(rec) || rec.Owner != want {
			return false
		}
	}
	return true
}

// LastLoadSwap returns the last load swap this leader started (zero
// before any), for metrics and tests.
func (p *Planner) LastLoadSwap() ring.Swap { return p.lastSwap }
