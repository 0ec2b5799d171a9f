package simulation

import (
	"cmp"
	"slices"
	"time"

	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ownership"
	"github.com/tenurehq/tenure/ring"
)

// gossipModel is membership as the voters see it: every voter holds a view
// of every node that follows the truth with detection delays, can be wrong
// (false suspicions), and is cut by partitions (cut[a][b] > 0: messages
// from a do not reach b; asymmetric cuts are allowed).
type gossipModel struct {
	s    *Sim
	cut  [][]int
	view [][]memberView // [observer][subject]; observers are the voters
	// suspect[o][n] > 0: voter o falsely suspects n.
	suspect [][]int
}

type memberView struct {
	known    bool
	state    member.State
	inc      uint64
	health   float64
	draining bool
	// unreachableSince is when the observer first missed the subject.
	unreachableSince int64
}

func newGossip(s *Sim) *gossipModel {
	return &gossipModel{s: s}
}

func (g *gossipModel) grow() {
	n := len(g.s.nodes)
	for len(g.cut) < n {
		g.cut = append(g.cut, nil)
		g.view = append(g.view, nil)
		g.suspect = append(g.suspect, nil)
	}
	for i := range n {
		for len(g.cut[i]) < n {
			g.cut[i] = append(g.cut[i], 0)
		}
		if !g.s.nodes[i].voter {
			continue // only voters observe (view, suspect): N×3, not N×N
		}
		for len(g.view[i]) < n {
			g.view[i] = append(g.view[i], memberView{})
			g.suspect[i] = append(g.suspect[i], 0)
		}
	}
}

// changed reports that something about n changed (process, health, drain,
// links): every observer refreshes its view of n after a gossip delay.
func (g *gossipModel) changed(n *node) {
	g.grow()
	for _, o := range g.s.nodes {
		if o.voter {
			g.refreshLater(o.idx, n.idx, g.s.jitter(20*time.Millisecond, 300*time.Millisecond))
		}
	}
}

// linksChanged refreshes every pair (after a partition starts or heals).
func (g *gossipModel) linksChanged() {
	g.grow()
	for _, o := range g.s.nodes {
		if !o.voter {
			continue
		}
		for _, n := range g.s.nodes {
			g.refreshLater(o.idx, n.idx, g.s.jitter(20*time.Millisecond, 300*time.Millisecond))
		}
	}
}

func (g *gossipModel) refreshLater(o, n int, d time.Duration) {
	g.s.after(d, evGossip, o, func() { g.refresh(o, n) })
}

// refresh recomputes observer o's view of n from the truth.
func (g *gossipModel) refresh(o, n int) {
	s := g.s
	sub := s.nodes[n]
	v := &g.view[o][n]
	reachable := sub.up && s.now >= sub.pausedUntil && g.cut[n][o] == 0 && g.cut[o][n] == 0
	old := *v
	switch {
	case reachable && g.suspect[o][n] == 0:
		*v = memberView{known: true, state: member.Alive, inc: sub.inc, health: sub.health, draining: sub.draining}
	case reachable:
		v.known, v.state, v.inc, v.health, v.draining = true, member.Suspect, sub.inc, sub.health, sub.draining
	default:
		if !v.known {
			return
		}
		if v.unreachableSince == 0 {
			v.unreachableSince = s.now
		}
		// Suspect after a probe timeout, dead after the suspicion timeout.
		switch since := time.Duration(s.now - v.unreachableSince); {
		case since >= 1500*time.Millisecond:
			v.state = member.Dead
		case since >= 300*time.Millisecond:
			v.state = member.Suspect
			g.refreshLater(o, n, 1500*time.Millisecond-since)
		default:
			g.refreshLater(o, n, 300*time.Millisecond-since)
		}
	}
	if reachable {
		v.unreachableSince = 0
	}
	if *v != old && s.raft.leader == o {
		leader := s.nodes[o]
		if leader.lead != nil && leader.lead.Established() {
			s.kickRound(leader, s.jitter(0, 5*time.Millisecond))
		}
	}
}

// view returns observer o's membership view, as the planner takes it.
func (g *gossipModel) members(o *node) []ownership.Member {
	g.grow()
	var out []ownership.Member
	for i, v := range g.view[o.idx] {
		if i == o.idx {
			out = append(out, g.s.placementAttrs(o.idx, ownership.Member{ID: o.id, Incarnation: o.inc, State: member.Alive, Health: o.health, Draining: o.draining}))
			continue
		}
		if !v.known {
			continue
		}
		out = append(out, g.s.placementAttrs(i, ownership.Member{ID: g.s.nodes[i].id, Incarnation: v.inc, State: v.state, Health: v.health, Draining: v.draining}))
	}
	return out
}

// placementAttrs adds node i's zone, weight and load summary to m. The
// load summary is node i's current one (gossip delay is not modelled for
// it: loads are a hint, and the planner re-reads them every round).
func (s *Sim) placementAttrs(i int, m ownership.Member) ownership.Member {
	if i < len(s.cfg.Zones) {
		m.Zone = s.cfg.Zones[i]
	}
	if i < len(s.cfg.Weights) {
		m.Weight = s.cfg.Weights[i]
	}
	if s.cfg.ShardLoads != nil && s.nodes[i].up {
		m.Load = s.loadReport(s.nodes[i])
	}
	return m
}

// loadReport is n's load summary: the total over the shards it acts on
// and its 3 hottest.
func (s *Sim) loadReport(n *node) *ownership.LoadReport {
	lr := &ownership.LoadReport{}
	shards := make([]uint32, 0, len(n.acting))
	for sh := range n.acting {
		shards = append(shards, sh)
	}
	slices.Sort(shards)
	for _, sh := range shards {
		l := s.shardLoad(sh)
		lr.Total += l
		lr.Hot = append(lr.Hot, ring.ShardLoad{Shard: sh, Load: l})
	}
	slices.SortStableFunc(lr.Hot, func(a, b ring.ShardLoad) int {
		return cmp.Or(cmp.Compare(b.Load, a.Load), cmp.Compare(a.Shard, b.Shard))
	})
	lr.Hot = lr.Hot[:min(3, len(lr.Hot))]
	return lr
}

func (s *Sim) shardLoad(sh uint32) float64 {
	if l, ok := s.cfg.ShardLoads[sh]; ok {
		return l
	}
	return 1
}
