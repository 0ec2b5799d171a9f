package cluster

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/raft"
)

// Forming the control group (bootstrap-expect), as Consul and Nomad do it,
// with one refinement: only the lowest id among the chosen voters calls
// BootstrapCluster. The others wait with an empty configuration; raft grants
// votes to a candidate while its own configuration is empty, so the
// bootstrapping node wins the first election and replicates the
// configuration to the rest. Conditions, all re-checked on every attempt:
//
//  0. the node has tried to join its seeds (ControlConfig.BootstrapGate):
//     a node that has not yet heard from them would see itself alone;
//  1. this node has no Raft state (no log, no snapshot);
//  2. gossip shows at least BootstrapExpect alive members with a Raft
//     address that do not gossip VoterNever; the initial voters are the
//     first BootstrapExpect of them, VoterAlways members first, then by id
//     (rankVoterCandidates);
//  3. this node is the first of them;
//  4. every visible alive member answers a Status RPC and none has Raft
//     state (if one has, a cluster exists and its leader will add us);
//  5. every chosen voter's own view yields the same chosen set.
//
// Several nodes attempting at once is harmless: BootstrapCluster on a node
// with state returns ErrCantBootstrap, and only one id is the lowest of an
// agreed set. What it cannot prevent is two groups of nodes that do not see
// each other in gossip at all bootstrapping two clusters — the same
// assumption Consul makes; start nodes with common seeds.

// aliveRaftMembers returns the alive members that advertise a Raft address,
// sorted by id, with this node present (at its own address, with its own
// ControlConfig.Voter preference) even if gossip does not list it yet.
func (g *ControlGroup) aliveRaftMembers() []Member {
	var out []Member
	self := false
	if g.peers != nil {
		for _, m := range g.peers.Members() {
			if m.ID == g.cfg.NodeID {
				m.RaftAddr = g.addr
				m.Tags = g.selfVoterTags(m.Tags)
				self = true
				out = append(out, m)
				continue
			}
			if m.State != StateAlive || m.RaftAddr == "" || ValidateNodeID(m.ID) != nil {
				continue
			}
			out = append(out, m)
		}
	}
	if !self {
		out = append(out, Member{Meta: Meta{ID: g.cfg.NodeID, RaftAddr: g.addr, Tags: g.selfVoterTags(nil)}, State: StateAlive})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// selfVoterTags returns tags with TagVoter set to this node's configured
// preference (a copy; tags is not modified).
func (g *ControlGroup) selfVoterTags(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags)+1)
	for k, v := range tags {
		out[k] = v
	}
	delete(out, TagVoter)
	if p, _ := ParseVoterPreference(string(g.cfg.Voter)); p != VoterAuto {
		out[TagVoter] = string(p)
	}
	return out
}

// bootstrapVoters returns the initial voters chosen from members (sorted by
// id): the first n that may vote, VoterAlways first; nil if fewer.
func bootstrapVoters(members []Member, n int) []Member {
	if n <= 0 {
		return nil
	}
	ranked := rankVoterCandidates(slices.Clone(members))
	if len(ranked) < n {
		return nil
	}
	return ranked[:n]
}

// bootstrapChoice is the set of initial voters this node would choose now,
// nil if not enough members are visible.
func (g *ControlGroup) bootstrapChoice() []string {
	chosen := bootstrapVoters(g.aliveRaftMembers(), g.cfg.BootstrapExpect)
	if chosen == nil {
		return nil
	}
	ids := make([]string, len(chosen))
	for i, m := range chosen {
		ids[i] = m.ID
	}
	return ids
}

func (g *ControlGroup) bootstrapLoop() {
	if g.cfg.BootstrapGate != nil {
		select {
		case <-g.cfg.BootstrapGate:
		case <-g.closing:
			return
		}
	}
	t := time.NewTicker(g.cfg.BootstrapInterval)
	defer t.Stop()
	for {
		if g.raftLastIndex() > 0 {
			return // bootstrapped, or joined by a leader
		}
		if g.tryBootstrap() {
			return
		}
		select {
		case <-t.C:
		case <-g.bootstrapSig:
		case <-g.closing:
			return
		}
	}
}

// tryBootstrap makes one attempt; it reports whether to stop trying.
func (g *ControlGroup) tryBootstrap() (done bool) {
	n := g.cfg.BootstrapExpect
	members := g.aliveRaftMembers()
	chosen := bootstrapVoters(members, n)
	if chosen == nil || chosen[0].ID != g.cfg.NodeID {
		return false
	}
	choice := make([]string, n)
	for i, m := range chosen {
		choice[i] = m.ID
	}
	for _, m := range members {
		if m.ID == g.cfg.NodeID {
			continue
		}
		st, err := g.statusOf(context.Background(), m.RaftAddr)
		if err != nil {
			g.log.Debug("cluster: bootstrap probe failed", "peer", m.ID, "err", err)
			return false
		}
		if st.ID != m.ID {
			g.log.Warn("cluster: bootstrap probe reached another node", "want", m.ID, "got", st.ID, "addr", m.RaftAddr)
			return false
		}
		if st.HasState {
			g.log.Info("cluster: peer has raft state; not bootstrapping", "peer", m.ID)
			return true
		}
		if slices.Contains(choice, m.ID) && !slices.Equal(st.Bootstrap, choice) {
			g.log.Debug("cluster: peers disagree on initial voters", "peer", m.ID, "theirs", st.Bootstrap, "ours", choice)
			return false
		}
	}
	conf := raft.Configuration{}
	for _, m := range chosen {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	r := g.rft()
	if r == nil {
		return false
	}
	err := r.BootstrapCluster(conf).Error()
	switch {
	case err == nil:
		g.log.Info("cluster: bootstrapped control group", "voters", choice)
		return true
	case errors.Is(err, raft.ErrCantBootstrap):
		return true
	}
	g.log.Warn("cluster: bootstrap failed", "err", err)
	return false
}
