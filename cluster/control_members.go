package cluster

import "github.com/tenurehq/tenure/cluster/gossip"

// Membership events seen by the control group: graceful leaves recorded so
// reconcile can remove the non-voters that left, pruned once they are gone.

// membershipLoop records graceful leaves and wakes the reconcile and
// bootstrap loops on every batch of membership events.
func (g *ControlGroup) membershipLoop() {
	for {
		select {
		case batch, ok := <-g.sub.C():
			if !ok {
				return
			}
			for _, ev := range batch {
				if ev.Kind == gossip.EventLeave {
					g.markLeft(ev.Member.ID, ev.Member.Incarnation)
				}
			}
			signal(g.reconcileSig)
			signal(g.bootstrapSig)
		case <-g.closing:
			return
		}
	}
}

func (g *ControlGroup) markLeft(id string, inc uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.left[id]; !ok || inc > old {
		g.left[id] = inc
	}
}

// leftSnapshot returns a copy of the left set, forgetting ids that came back
// with a higher incarnation.
func (g *ControlGroup) leftSnapshot(members []Member) map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range members {
		if inc, ok := g.left[m.ID]; ok && m.State == StateAlive && m.Incarnation > inc {
			delete(g.left, m.ID)
		}
	}
	out := make(map[string]uint64, len(g.left))
	for k, v := range g.left {
		out[k] = v
	}
	return out
}

// pruneLeft forgets left ids that are neither in the configuration nor in
// gossip any more (reaped): nothing can re-add them by mistake.
func (g *ControlGroup) pruneLeft(servers []ServerInfo, members []Member) {
	known := map[string]bool{}
	for _, s := range servers {
		known[s.ID] = true
	}
	for _, m := range members {
		known[m.ID] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.left {
		if !known[id] {
			delete(g.left, id)
		}
	}
}
