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
	zone     map[string]string // node id -> zone
	weight   map[string]int    // node id -> weight (0: 1)
	load     map[string]*LoadReport
	election map[uint32]string // election shard -> group
	placed   []uint32
}

// memberAttrs is what the planner remembers of a node's gossip between
// rounds.
type memberAttrs struct {
	group, zone string
	weight      int
	load        *LoadReport
}

// groupView builds the round's group view. A node's group is what gossip
// says, or — while gossip does not list it (a brief blip) — what it said
// last, so a flapping member keeps its elections like it keeps its ring
// place (hysteresis). Nodes without a ledger record are forgotten.
func (p *Planner) groupView(in Input, t table) groupView {
	partitions := p.cfg.Ring.Partitions
	g := groupView{member: make(map[string]string, len(in.Members)), zone: make(map[string]string, len(in.Members)),
		weight: make(map[string]int, len(in.Members)), load: make(map[string]*LoadReport, len(in.Members)),
		election: make(map[uint32]string, len(in.Elections))}
	if p.attrOf == nil {
		p.attrOf = make(map[string]memberAttrs)
	}
	for _, m := range sortedMembers(in.Members) {
		p.attrOf[m.ID] = memberAttrs{group: m.Group, zone: m.Zone, weight: m.Weight, load: m.Load}
	}
	for id, a := range p.attrOf {
		if _, ok := t.nodes[id]; !ok {
			delete(p.attrOf, id)
			continue
		}
		g.member[id], g.zone[id], g.weight[id], g.load[id] = a.group, a.zone, a.weight, a.load
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
// ring.Assign put it (which honours the resignation hint itself). An
// election shard goes where electionTargets put it.
func (p *Planner) placementTarget(t table, rec ledger.ShardRecord, valid bool) string {
	if _, isElection := t.groups.election[rec.Shard]; !isElection {
		return p.target(rec.Shard)
	}
	return p.electionTarget[rec.Shard]
}

// electionTargets places this round's election shards. An election shard
// is placed by rendezvous hashing among the ring members (the eligible
// nodes) of its group and is sticky: it stays with a valid owner that is
// still such a candidate, so a member joining the group moves no
// leadership. When the group's candidates span several zones, a shard
// that must be placed goes to the zone holding the fewest of the group's
// elections (those that stay, then those placed before it in shard order),
// by rendezvous within that zone: a group's leaders spread across zones
// where possible, and losing a zone loses only its share of them.
func (p *Planner) electionTargets(t table) {
	p.electionTarget = make(map[uint32]string, len(t.groups.election))
	byGroup := map[string][]uint32{}
	var groups []string
	for _, s := range t.groups.placed {
		g, ok := t.groups.election[s]
		if !ok {
			continue
		}
		if _, seen := byGroup[g]; !seen {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], s)
	}
	slices.Sort(groups)
	for _, group := range groups {
		var cands []string
		zones := map[string]int{} // zone -> elections of the group placed there
		for _, id := range p.ringKey {
			if g, ok := t.groups.member[id]; ok && g == group {
				cands = append(cands, id)
				zones[t.groups.zone[id]] = 0
			}
		}
		var place []uint32
		for _, s := range byGroup[group] {
			rec := t.shard(s)
			if t.valid(rec) && rec.State == ledger.ShardOwned && rec.Owner != rec.AvoidOwner && slices.Contains(cands, rec.Owner) {
				p.electionTarget[s] = rec.Owner
				zones[t.groups.zone[rec.Owner]]++
				continue
			}
			place = append(place, s)
		}
		for _, s := range place {
			rec := t.shard(s)
			target := steer(rec, t.valid(rec), rendezvous(s, cands), cands)
			if len(zones) > 1 {
				target = p.zoneSpread(t, rec, cands, zones)
			}
			p.electionTarget[s] = target
			if target != "" {
				zones[t.groups.zone[target]]++
			}
		}
	}
}

// zoneSpread picks rec's election owner among cands in the zone with the
// fewest of the group's elections (ties: all such zones), by rendezvous,
// avoiding rec.AvoidOwner while another candidate exists. A move in
// flight (a valid Revoking shard whose target is still a candidate) keeps
// its target, so a change never moves an election twice.
func (p *Planner) zoneSpread(t table, rec ledger.ShardRecord, cands []string, zones map[string]int) string {
	if rec.State == ledger.ShardRevoking && t.valid(rec) && rec.Target != rec.AvoidOwner && slices.Contains(cands, rec.Target) {
		return rec.Target
	}
	pool := cands
	if rec.AvoidOwner != "" && len(cands) > 1 && slices.Contains(cands, rec.AvoidOwner) {
		pool = slices.DeleteFunc(slices.Clone(cands), func(c string) bool { return c == rec.AvoidOwner })
	}
	least := -1
	for _, c := range pool {
		if n := zones[t.groups.zone[c]]; least < 0 || n < least {
			least = n
		}
	}
	var best []string
	for _, c := range pool {
		if zones[t.groups.zone[c]] == least {
			best = append(best, c)
		}
	}
	return rendezvous(rec.Shard, best)
}
