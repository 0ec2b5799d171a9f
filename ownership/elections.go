package ownership

import (
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/tenurehq/tenure/ledger"
)

// This file holds the placement rules beyond the ring: resignations
// (ShardRecord.AvoidOwner) and, for shards ≥ Partitions, group-scoped
// election shards.

// rendezvous returns the candidate with the highest hash of (candidate,
// shard) — rendezvous (highest random weight) hashing: deterministic, and
// a candidate joining or leaving moves only the shards it wins or held.
// candidates need not be sorted; ties (astronomically rare) go to the
// smaller id. It returns "" when there are no candidates.
func rendezvous(shard uint32, candidates []string) string {
	var best string
	var bestScore uint64
	var buf []byte
	for _, c := range candidates {
		buf = binary.BigEndian.AppendUint32(append(buf[:0], c...), shard)
		score := xxhash.Sum64(buf)
		if best == "" || score > bestScore || (score == bestScore && c < best) {
			best, bestScore = c, score
		}
	}
	return best
}

// steer applies a resignation hint to the placement target of rec's shard.
// When the shard's AvoidOwner is the target and another candidate exists,
// the shard goes elsewhere: to its current owner if that is a valid,
// eligible candidate (so a resigned shard is not moved back to rebalance),
// else to the candidates' rendezvous choice without AvoidOwner. With no
// other candidate the resigner keeps the target (and the grant clears the
// hint in the ledger).
func steer(rec ledger.ShardRecord, valid bool, target string, candidates []string) string {
	avoid := rec.AvoidOwner
	if avoid == "" || target != avoid {
		return target
	}
	if valid && rec.Owner != avoid && slices.Contains(candidates, rec.Owner) {
		return rec.Owner
	}
	others := slices.DeleteFunc(slices.Clone(candidates), func(c string) bool { return c == avoid })
	if alt := rendezvous(rec.Shard, others); alt != "" {
		return alt
	}
	return target
}

// groupView is one round's view of groups: each member's gossiped group
// and each election shard's group, plus every shard the planner places
// (the partitions, then the election shards), sorted.
type groupView struct {
	member   map[string]string // node id -> group
	election map[uint32]string // election shard -> group
	placed   []uint32
}

// groupView builds the round's group view. A node's group is what gossip
// says, or — while gossip does not list it (a brief blip) — what it said
// last, so a flapping member keeps its elections like it keeps its ring
// place (hysteresis). Nodes without a ledger record are forgotten.
func (p *Planner) groupView(in Input, t table) groupView {
	partitions := p.cfg.Ring.Partitions
	g := groupView{member: make(map[string]string, len(in.Members)), election: make(map[uint32]string, len(in.Elections))}
	if p.groupOf == nil {
		p.groupOf = make(map[string]string)
	}
	for _, m := range sortedMembers(in.Members) {
		g.member[m.ID] = m.Group
		p.groupOf[m.ID] = m.Group
	}
	for id, group := range p.groupOf {
		if _, ok := t.nodes[id]; !ok {
			delete(p.groupOf, id)
			continue
		}
		if _, ok := g.member[id]; !ok {
			g.member[id] = group
		}
	}
	g.placed = make([]uint32, 0, partitions+len(in.Elections))
	for s := range uint32(partitions) {
		g.placed = append(g.placed, s)
	}
	var extra []uint32
	for _, e := range in.Elections {
		if e.Shard < uint32(partitions) {
			continue // not an election shard: a foreign or corrupt record
		}
		if _, dup := g.election[e.Shard]; !dup {
			extra = append(extra, e.Shard)
		}
		// Duplicates cannot come from the ledger; keep the smallest group
		// so the result does not depend on input order.
		if old, dup := g.election[e.Shard]; !dup || e.Group < old {
			g.election[e.Shard] = e.Group
		}
	}
	slices.Sort(extra)
	g.placed = append(g.placed, extra...)
	return g
}

// placementTarget is where rec's shard should be. A partition goes where
// ring.Assign put it (which honours the resignation hint itself). An election shard is placed by
// rendezvous hashing among the ring members (the eligible nodes) of its
// group and is sticky: it stays with a valid owner that is still such a
// candidate, so a member joining the group moves no leadership.
func (p *Planner) placementTarget(t table, rec ledger.ShardRecord, valid bool) string {
	group, isElection := t.groups.election[rec.Shard]
	if !isElection {
		return p.target(rec.Shard)
	}
	var cands []string
	for _, id := range p.ringKey {
		if g, ok := t.groups.member[id]; ok && g == group {
			cands = append(cands, id)
		}
	}
	if valid && rec.State == ledger.ShardOwned && rec.Owner != rec.AvoidOwner && slices.Contains(cands, rec.Owner) {
		return rec.Owner
	}
	return steer(rec, valid, rendezvous(rec.Shard, cands), cands)
}
