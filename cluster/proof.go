package cluster

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"

	gometrics "github.com/hashicorp/go-metrics/compat"
)

// Gossip never changes the Raft configuration by itself (issue 25). Anyone
// with the gossip key can gossip any node id at any address; only a
// connection authenticated with the node's certificate proves that id at
// that address. With ControlConfig.Authenticate set:
//
//   - checkDialed records, on every connection this node dials, the id
//     the server's certificate names at that address (proofLog);
//   - the reconciler (planReconcile) acts on a gossiped member — adding
//     it, moving its address, or removing the server whose address it
//     claims — only once its id is proven at the Raft address it gossips;
//     an unproven member is probed (a Control.Status call, whose dial runs
//     checkDialed) and, until proven, ignored for Raft, logged and counted
//     (tenure_control_unproven_members, Unproven, `tenure members`);
//   - a voter's address thus changes only when the node proves it (or an
//     operator removes it).
//
// Without Authenticate (loopback, Insecure) nothing is proven and gossip is
// trusted as before.

// proofLog is which node id this node proved at which Raft address.
type proofLog struct {
	mu sync.Mutex
	at map[string]string // id → address
	// unproven: ids gossiped at an address they have not proven, with the
	// address, as of the last reconcile round.
	unproven map[string]string
	logged   map[string]string // id → address last logged as unproven
}

func newProofLog() *proofLog {
	return &proofLog{at: map[string]string{}, unproven: map[string]string{}, logged: map[string]string{}}
}

func (p *proofLog) record(id, addr string) {
	p.mu.Lock()
	p.at[id] = addr
	p.mu.Unlock()
}

func (p *proofLog) provenAt(id, addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at[id] == addr
}

// idsAt returns the ids the Raft configuration and gossip place at addr.
func (g *ControlGroup) idsAt(addr string) map[string]bool {
	ids := map[string]bool{}
	if conf, err := g.latestConfiguration(); err == nil {
		{
			for _, s := range conf.Servers {
				if string(s.Address) == addr {
					ids[string(s.ID)] = true
				}
			}
		}
	}
	if g.peers != nil {
		for _, m := range g.peers.Members() {
			if m.RaftAddr == addr && m.State.Up() {
				ids[m.ID] = true
			}
		}
	}
	return ids
}

// maxProofsPerRound bounds the probes one reconcile round starts.
const maxProofsPerRound = 64

// proveMembers returns which alive members have proven their id at the
// Raft address they gossip, probing those that have not (in parallel,
// bounded by RPCTimeout). nil when nothing can be proven (no
// Authenticate): every member counts as proven.
func (g *ControlGroup) proveMembers(ctx context.Context, members []Member) map[string]bool {
	if g.cfg.Authenticate == nil {
		return nil
	}
	proven := map[string]bool{g.cfg.NodeID: true}
	var todo []Member
	for _, m := range members {
		if m.State == StateSuspect && g.proofs.provenAt(m.ID, m.RaftAddr) {
			proven[m.ID] = true // proven before it became suspect
		}
		if m.State != StateAlive || m.RaftAddr == "" || m.ID == g.cfg.NodeID {
			continue
		}
		if g.proofs.provenAt(m.ID, m.RaftAddr) {
			proven[m.ID] = true
		} else if len(todo) < maxProofsPerRound {
			todo = append(todo, m)
		}
	}
	var wg sync.WaitGroup
	for _, m := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.statusOf(ctx, m.RaftAddr); err != nil {
				g.log.Debug("cluster: proof of a gossiped member failed", "member", m.ID, "addr", m.RaftAddr, "err", err)
			}
		}()
	}
	wg.Wait()
	for _, m := range todo {
		if g.proofs.provenAt(m.ID, m.RaftAddr) {
			proven[m.ID] = true
		}
	}
	g.reportUnproven(members, proven)
	return proven
}

// reportUnproven records, logs (once per id and address) and counts the
// alive members that have not proven their id.
func (g *ControlGroup) reportUnproven(members []Member, proven map[string]bool) {
	p := g.proofs
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unproven = map[string]string{}
	for _, m := range members {
		if m.State != StateAlive || m.RaftAddr == "" || proven[m.ID] {
			continue
		}
		p.unproven[m.ID] = m.RaftAddr
		if p.logged[m.ID] != m.RaftAddr {
			p.logged[m.ID] = m.RaftAddr
			g.log.Warn("cluster: gossip names a member that cannot prove its id at its Raft address; ignored for the Raft configuration",
				"member", m.ID, "raft_addr", m.RaftAddr)
		}
	}
	for id := range p.logged {
		if _, ok := p.unproven[id]; !ok {
			delete(p.logged, id)
		}
	}
	gometrics.SetGauge([]string{"control", "unproven_members"}, float32(len(p.unproven)))
}

// Unproven returns the members gossip lists alive whose id has not been
// proven at the Raft address they gossip, as of the leader's last
// reconcile round ("id@addr", sorted; empty on followers and without
// authentication).
func (g *ControlGroup) Unproven() []string {
	g.proofs.mu.Lock()
	defer g.proofs.mu.Unlock()
	out := make([]string, 0, len(g.proofs.unproven))
	for id, addr := range g.proofs.unproven {
		out = append(out, id+"@"+addr)
	}
	sort.Strings(out)
	return out
}

// checkDialed proves the server at addr: its certificate must name a node
// (not an operator) that the Raft configuration or gossip places at addr.
// An address nobody is known at is refused (before, any node certificate
// was accepted there). The proof is recorded for the reconciler.
func (g *ControlGroup) checkDialed(ctx context.Context, addr string, c net.Conn) (Peer, error) {
	p, err := g.cfg.Authenticate(ctx, c)
	if err != nil {
		return Peer{}, err
	}
	if p.IsOperator() {
		return Peer{}, fmt.Errorf("cluster: server at %s presented an operator certificate (%s), not a node's", addr, p.ID)
	}
	if g.peers == nil && g.rft() == nil && !g.cfg.lazyRaft() {
		g.proofs.record(p.ID, addr)
		return p, nil
	}
	ids := g.idsAt(addr)
	if !ids[p.ID] {
		names := make([]string, 0, len(ids))
		for id := range ids {
			names = append(names, id)
		}
		sort.Strings(names)
		if len(names) == 0 {
			return Peer{}, fmt.Errorf("cluster: server at %s is %s, but no member is known at that address", addr, p)
		}
		return Peer{}, fmt.Errorf("cluster: server at %s is %s, but %s is the member placed there", addr, p, strings.Join(names, ", "))
	}
	g.proofs.record(p.ID, addr)
	return p, nil
}
