package ownership

import (
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// Fenced takeover (ledger.SetTakeoverPolicy, docs/guarantees.md): for a
// shard under the fenced policy the leader does not wait out a dead
// owner's lease. As soon as it believes the owner dead — no heartbeat seen
// for FencedAfter, or gossip reports it dead — it grants the shard to the
// owner's successor with a Takeover grant (a CAS on the epoch that bumps
// it), without expiring the owner: its other shards keep the lease rule.
// S2 holds (every write fenced with the old epoch is refused from the
// grant on); S4 is waived for these shards only — the old owner, if it is
// in fact alive, may act until it learns the new epoch or its lease ends.

// fencedView is one round's view of the policy and of who is dead by the
// fenced rule.
type fencedView struct {
	ranges []ledger.ShardRange
	dead   map[string]bool // node id -> gossip reports it dead
}

func newFencedView(in Input) fencedView {
	v := fencedView{ranges: in.Fenced}
	for _, m := range in.Members {
		if m.State == member.Dead {
			if v.dead == nil {
				v.dead = make(map[string]bool)
			}
			v.dead[m.ID] = true
		}
	}
	return v
}

func (v fencedView) shard(s uint32) bool {
	for _, r := range v.ranges {
		if r.Contains(s) {
			return true
		}
	}
	return false
}

// fencedDead reports whether the leader treats id as dead for fenced
// shards: gossip reports it dead, or its last heartbeat was seen at least
// FencedAfter ago (on the leader's clock; fencedSeen), or it holds no
// lease at all.
func (p *Planner) fencedDead(now time.Time, t table, id string) bool {
	tr := p.nodes[id]
	if tr == nil || tr.expired {
		return true
	}
	return t.fenced.dead[id] || now.Sub(p.fencedSeen(tr)) >= p.cfg.fencedAfter()
}

// fencedSeen is when the fenced rule counts tr as last seen: lastSeen, but
// after a slow election no earlier than establishGrace − FencedAfter after
// the term began — as for expiries (Establish), a new leader gives every
// node establishGrace to renew with it before it takes its fenced shards
// away.
func (p *Planner) fencedSeen(tr *nodeTrack) time.Time {
	if g := p.establishedAt.Add(p.cfg.establishGrace() - p.cfg.fencedAfter()); tr.lastSeen.Before(g) {
		return g
	}
	return tr.lastSeen
}

// fencedSuccessor is where a fenced shard goes when its owner (or its
// placement target) is dead by the fenced rule: the placement target if
// that is someone else and alive, else the rendezvous choice among the
// placement ring's live members (of the election's group, for an election
// shard) without the owner, honouring a resignation hint. "" when there
// is none.
func (p *Planner) fencedSuccessor(now time.Time, t table, rec ledger.ShardRecord, target string) string {
	if target != "" && target != rec.Owner && !p.fencedDead(now, t, target) {
		return target
	}
	group, isElection := t.groups.election[rec.Shard]
	var cands []string
	for _, id := range p.ringKey {
		if id == rec.Owner || p.fencedDead(now, t, id) {
			continue
		}
		if isElection && t.groups.member[id] != group {
			continue
		}
		cands = append(cands, id)
	}
	return steer(rec, false, rendezvous(rec.Shard, cands), cands)
}

// fenced applies the fenced rule to one shard of the placement pass. For a
// shard not under the policy it returns target unchanged, except that while
// any shard is fenced a valid owner keeps its shard rather than start a
// planned move to a node dead by the fenced rule (a fenced takeover leaves
// the ring unbalanced toward the dead owner until its lease expires). For a fenced
// shard it returns the Takeover grant to propose (ok) when the shard's
// valid owner is dead by the fenced rule, and otherwise the target with a
// dead node replaced by a live successor, so that nothing is granted or
// handed to a node the leader already believes dead.
func (p *Planner) fenced(now time.Time, t table, rec ledger.ShardRecord, valid bool, target string) (string, ledger.Grant, bool) {
	if !t.fenced.shard(rec.Shard) {
		if len(t.fenced.ranges) > 0 && valid && target != "" && target != rec.Owner && p.fencedDead(now, t, target) {
			return rec.Owner, ledger.Grant{}, false
		}
		return target, ledger.Grant{}, false
	}
	if valid && p.fencedDead(now, t, rec.Owner) {
		to := p.fencedSuccessor(now, t, rec, target)
		n, ok := t.nodes[to]
		if to == "" || !ok {
			return "", ledger.Grant{}, false // nobody to take over: leave it
		}
		return "", ledger.Grant{Shard: rec.Shard, ExpectedEpoch: rec.Epoch, Owner: to,
			OwnerIncarnation: n.Incarnation, OwnerLiveness: n.Liveness, Takeover: true, Now: now.UnixNano(),
			Reason: "fenced takeover from " + rec.Owner}, true
	}
	if target != "" && p.fencedDead(now, t, target) {
		if valid && slices.Contains(p.ringKey, rec.Owner) {
			return rec.Owner, ledger.Grant{}, false // keep it where it is
		}
		return p.fencedSuccessor(now, t, rec, target), ledger.Grant{}, false
	}
	return target, ledger.Grant{}, false
}
