// Shard moves: the recorder that turns ownership events into moves with
// their causes, the bounded move log, and GET /v1/moves.

package httpapi

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// recordMoves records ownership moves for /v1/moves until ctx ends or the
// node's event stream closes.
func (h *Handler) recordMoves(ctx context.Context, events <-chan OwnershipEvent) {
	var members map[string]apitypes.Member
	var membersAt time.Time
	var mt moveTracker
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			reason := ""
			if sh, ok := h.node.Shard(ev.Shard); ok && sh.Epoch == ev.Epoch {
				reason = sh.Reason
			}
			if now := time.Now(); members == nil || now.Sub(membersAt) > 200*time.Millisecond {
				members, membersAt = map[string]apitypes.Member{}, now
				for _, m := range h.node.Members() {
					members[m.ID] = m
				}
			}
			h.moves.add(mt.move(ev, reason, members))
		}
	}
}

// listMoves answers the recent moves, newest first; ?limit= bounds them
// (the log holds at most maxMoves, so there is no cursor).
func (h *Handler) listMoves(w http.ResponseWriter, r *http.Request) {
	limit, _, ok := pageParams(w, r, maxMoves, maxMoves)
	if !ok {
		return
	}
	ms := h.moves.list()
	writeJSON(w, http.StatusOK, ms[:min(len(ms), limit)])
}

// moveTracker turns ownership events into moves. It remembers each
// shard's last owner: a failover is seen as two events — the owner's lease
// lapses (owner "") and then the grant to the next one (previous "") —
// and the grant is the move from the owner that lapsed.
type moveTracker struct {
	last map[uint32]string
}

func (t *moveTracker) move(ev OwnershipEvent, reason string, members map[string]apitypes.Member) apitypes.Move {
	if t.last == nil {
		t.last = map[uint32]string{}
	}
	from := ev.Previous
	if from == "" && ev.Owner != "" {
		from = t.last[ev.Shard]
	}
	if ev.Owner != "" {
		t.last[ev.Shard] = ev.Owner
	} else if ev.Previous != "" {
		t.last[ev.Shard] = ev.Previous
	}
	return apitypes.Move{At: ev.At, Shard: ev.Shard, Epoch: ev.Epoch, From: from, To: ev.Owner, Reason: reason,
		Cause: moveCause(from, ev.Owner, reason, members)}
}

// moveCause explains a move from prev to owner ("" while unowned): from
// the ledger's reason for the record when it names one (a grant after
// "owner n5 expired", a handoff), else from the previous owner's
// membership.
func moveCause(prev, owner, reason string, members map[string]apitypes.Member) string {
	m, known := members[prev]
	switch {
	case owner == "" && prev == "":
		return "unowned"
	case owner == "":
		switch {
		case known && (m.State == "dead" || m.State == "left"):
			return prev + " " + m.State
		case known && !m.Live:
			return prev + " lease expired"
		}
		return prev + " released it"
	case prev == "":
		return "first owner"
	case prev == owner:
		return "re-granted to " + prev
	}
	if r, ok := strings.CutPrefix(reason, "drain "); ok { // a revocation's reason
		return "drain of " + r
	}
	if r, ok := strings.CutPrefix(reason, "owner "); ok { // the ledger's grant reasons
		switch {
		case strings.HasSuffix(r, " expired"):
			return strings.TrimSuffix(r, " expired") + " lease expired"
		case strings.HasSuffix(r, " restarted"):
			return r
		case strings.HasSuffix(r, " unknown"):
			return strings.TrimSuffix(r, " unknown") + " left"
		}
	}
	// A handoff is planned: the previous owner released the shard to the
	// target of its revocation (a drain, a rebalance, an operator's pin or
	// exclusion), whose reason it carries ("handoff: pinned to n3"). A
	// takeover follows a revocation its owner did not answer.
	if r, ok := strings.CutPrefix(reason, "handoff: "); ok {
		switch {
		case strings.HasPrefix(r, "pinned to "), strings.HasSuffix(r, " excluded"):
			return r
		case strings.HasPrefix(r, "load "):
			return "load balance"
		case strings.HasPrefix(r, "drain "):
			return "drain of " + strings.TrimPrefix(r, "drain ")
		}
	}
	handoff := reason == "handoff" || strings.HasPrefix(reason, "handoff: ") || strings.HasPrefix(reason, "transfer from ") || reason == "rebalance"
	switch {
	case !known:
		return prev + " left"
	case m.Excluded:
		return prev + " excluded"
	case m.Draining:
		return "drain of " + prev
	case handoff:
		return "rebalance"
	case m.State == "dead" || m.State == "left" || m.State == "suspect":
		return prev + " " + m.State
	case !m.Live:
		return prev + " lease expired"
	case m.Health < 0.5:
		return prev + " unhealthy"
	}
	return "rebalance"
}

// moveLog keeps the most recent ownership moves: a ring of maxMoves (an
// add once full overwrites the oldest in place; it used to shift all 256
// moves, on every move a member saw — perf: 15 % of a member while 4,096
// shards were being re-granted, docs/benchmarks.md).
type moveLog struct {
	mu    sync.Mutex
	moves []apitypes.Move // the ring, up to maxMoves
	next  int             // where the next add goes once the ring is full
}

func (l *moveLog) add(m apitypes.Move) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.moves) < maxMoves {
		l.moves = append(l.moves, m)
		return
	}
	l.moves[l.next] = m
	l.next = (l.next + 1) % maxMoves
}

// list returns the moves newest first.
func (l *moveLog) list() []apitypes.Move {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]apitypes.Move, 0, len(l.moves))
	for i := range l.moves {
		// Oldest at next (once full), newest just before it.
		out = append(out, l.moves[(l.next-1-i+2*len(l.moves))%len(l.moves)])
	}
	return out
}
