package cluster

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// Forming the control group (bootstrap-expect), as Consul and Nomad do it,
// with one refinement: only the lowest id among the chosen voters calls
// BootstrapCluster. The others wait with an empty configuration; raft grants
// votes to a candidate while its own configuration is empty, so the
// bootstrapping node wins the first election and replicates the
// configuration to the rest. Conditions, all re-checked on every attempt:
//
//  1. this node has no Raft state (no log, no snapshot);
//  2. gossip shows at least BootstrapExpect alive members with a Raft
//     address; the initial voters are the BootstrapExpect lowest ids;
//  3. this node is the lowest of them;
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
// sorted by id, with this node present (at its own address) even if gossip
// does not list it yet.
func (g *ControlGroup) aliveRaftMembers() []Member {
	var out []Member
	self := false
	if g.peers != nil {
		for _, m := range g.peers.Members() {
			if m.ID == g.cfg.NodeID {
				m.RaftAddr = g.addr
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
		out = append(out, Member{Meta: Meta{ID: g.cfg.NodeID, RaftAddr: g.addr}, State: StateAlive})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// bootstrapChoice is the set of initial voters this node would choose now,
// nil if not enough members are visible.
func (g *ControlGroup) bootstrapChoice() []string {
	n := g.cfg.BootstrapExpect
	if n <= 0 {
		return nil
	}
	members := g.aliveRaftMembers()
	if len(members) < n {
		return nil
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = members[i].ID
	}
	return ids
}

func (g *ControlGroup) bootstrapLoop() {
	t := time.NewTicker(g.cfg.BootstrapInterval)
	defer t.Stop()
	for {
		if g.raft.LastIndex() > 0 {
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
	if len(members) < n {
		return false
	}
	chosen := members[:n]
	if chosen[0].ID != g.cfg.NodeID {
		return false
	}
	choice := make([]string, n)
	for i, m := range chosen {
		choice[i] = m.ID
	}
	for i, m := range members {
		if m.ID == g.cfg.NodeID {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.RPCTimeout)
		var st wire.StatusReply
		err := g.pool.call(ctx, m.RaftAddr, "Control.Status", &wire.StatusArgs{}, &st)
		cancel()
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
		if i < n && !slices.Equal(st.Bootstrap, choice) {
			g.log.Debug("cluster: peers disagree on initial voters", "peer", m.ID, "theirs", st.Bootstrap, "ours", choice)
			return false
		}
	}
	conf := raft.Configuration{}
	for _, m := range chosen {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	err := g.raft.BootstrapCluster(conf).Error()
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
