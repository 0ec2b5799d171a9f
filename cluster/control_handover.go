package cluster

import (
	"context"
	"sort"

	"github.com/hashicorp/raft"
)

// HandOverLeadership is a leader's planned step down before it stops: it
// hands leadership to a voter that gossip reports alive and waits (within
// ctx) until that voter leads, so a planned stop of the leader costs one
// round of TimeoutNow and a Barrier instead of an election timeout — with
// every node's renewals stalled for it (a rolling upgrade replaces the
// leader too).
//
// It returns the id it handed leadership to, or "" and nil when this node
// does not lead or no other voter is alive in gossip: a transfer aimed at a
// voter that is gone would only hold the stop (raft dials it and waits an
// election timeout), and the group elects a new leader by itself once this
// one is gone. The target is the first live voter in id order, so the
// choice is deterministic; raft brings it up to date before the TimeoutNow.
//
// Raft refuses new commands while a transfer runs: call it after the
// node's last proposal (its drain), never in the middle of work.
func (g *ControlGroup) HandOverLeadership(ctx context.Context) (string, error) {
	if !g.isRaftLeader() || g.peers == nil {
		return "", nil
	}
	target, addr := g.handOverTarget()
	if target == "" {
		return "", nil
	}
	r := g.rft()
	if r == nil {
		return "", nil
	}
	f := r.LeadershipTransferToServer(raft.ServerID(target), raft.ServerAddress(addr))
	if err := g.waitCtx(ctx, f); err != nil {
		return target, g.mapRaftErr(err)
	}
	return target, nil
}

// handOverTarget picks the voter HandOverLeadership hands over to: not this
// node, a voter in the latest configuration, alive (not suspect) in gossip.
func (g *ControlGroup) handOverTarget() (id, addr string) {
	servers, err := g.Servers()
	if err != nil {
		return "", ""
	}
	alive := make(map[string]bool)
	for _, m := range g.peers.Members() {
		if m.State == StateAlive && !m.Leaving {
			alive[m.ID] = true
		}
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	for _, s := range servers {
		if s.Voter && s.ID != g.cfg.NodeID && alive[s.ID] {
			return s.ID, s.Addr
		}
	}
	return "", ""
}
