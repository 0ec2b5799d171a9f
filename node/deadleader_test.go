package node

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// A control-group leader whose host dies the way a killed container's does
// — its open connections reset, then dials to its address hang (SYNs
// dropped) — costs its own lease, not the survivors': renewals that dial
// it end as soon as the member sees the election, the member renews with
// the new leader, and only the dead node is expired. The lease here (3 s)
// is far longer than an election (fast profile Raft: 300 ms), so a
// survivor expired here was kept from renewing by the dead leader — as
// every survivor was between Docker containers before renewals followed
// leader changes (docs/benchmarks.md): both of a member's in-flight
// renewal slots hung dialling the dead leader for a whole lease.
func TestDeadLeaderHostExpiresOnlyItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	defer func(old func(*ownership.Config)) { tuneOwnership = old }(tuneOwnership)
	tuneOwnership = func(c *ownership.Config) { c.Lease = 3 * time.Second }
	start := time.Now()
	ctx := testCtx(t)
	net := NewMemNetwork()
	fast := func(c *Config) { c.Profile = ProfileFast }
	nodes := []*Node{startMem(t, net, "a", fast), startMem(t, net, "b", fast), startMem(t, net, "c", fast)}
	for _, n := range nodes {
		if err := n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	state := func(n *Node) *ledger.State { return n.be.(*netBackend).fsm.State() }
	if !waitTrue(ctx, func() bool {
		for _, n := range nodes {
			if state(n).ActiveVersion() < ledger.VersionLeaseRenewals {
				return false
			}
		}
		return true
	}) {
		t.Fatal("cluster version 4 never became active")
	}
	var leader *Node
	var survivors []*Node
	if !waitTrue(ctx, func() bool {
		id := nodes[0].Status().ControlLeader
		leader, survivors = nil, nil
		for _, n := range nodes {
			if n.ID() == id {
				leader = n
			} else {
				survivors = append(survivors, n)
			}
		}
		return leader != nil
	}) {
		t.Fatal("no control-group leader")
	}
	t.Logf("PHASE setup done after %v (ctx deadline in %v)", time.Since(start).Round(time.Millisecond), func() time.Duration { d, _ := ctx.Deadline(); return time.Until(d).Round(time.Millisecond) }())
	liveness := map[string]uint64{}
	for _, n := range nodes {
		rec, _ := state(survivors[0]).Node(n.ID())
		liveness[n.ID()] = rec.Liveness
	}
	deadAt := time.Now()
	net.Gossip.Partition([]string{leader.cfg.GossipAddr})
	net.Raft.Blackhole(leader.cfg.RaftAddr) // dials hang, messages vanish
	net.Raft.Isolate(leader.cfg.RaftAddr)   // and open streams break
	// The dead leader is expired once its lease is over (bound + lease).
	if !waitTrue(ctx, func() bool {
		rec, _ := state(survivors[0]).Node(leader.ID())
		return rec.Liveness > liveness[leader.ID()]
	}) {
		t.Fatalf("the dead leader %s was never expired (%v after the cut, %v after start)", leader.ID(), time.Since(deadAt).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	t.Logf("dead leader %s expired after %v", leader.ID(), time.Since(deadAt).Round(time.Millisecond))
	for _, n := range survivors {
		if rec, _ := state(survivors[0]).Node(n.ID()); rec.Liveness != liveness[n.ID()] {
			t.Errorf("survivor %s was expired too (liveness %d → %d): its renewals did not reach the new leader within a 3 s lease",
				n.ID(), liveness[n.ID()], rec.Liveness)
		}
	}
}
