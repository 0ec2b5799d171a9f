package node

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// At cluster version 4 an idle cluster renews leases off the log: its Raft
// log barely grows, every node keeps a lease, and the members view shows
// each node's own last renewal rather than a stale heartbeat time.
func TestIdleClusterRenewsOffTheLog(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	b := startMem(t, net, "b")
	c := startMem(t, net, "c")
	for _, n := range []*Node{a, b, c} {
		if err := n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.waitFor(ctx, func() bool {
		return a.be.(*netBackend).fsm.State().ActiveVersion() >= ledger.VersionLeaseRenewals
	}); err != nil {
		t.Fatalf("cluster version 4 never became active: %v", err)
	}
	tm, _ := a.cfg.Profile.Timing()
	// Measure the log over a window of several leases' worth of renewals
	// (a measurement window, not a wait for a condition).
	before := a.AppliedIndex()
	time.Sleep(3 * tm.Lease)
	grown := a.AppliedIndex() - before
	renewals := uint64(3 * 3 * tm.Lease / tm.RenewEvery) // what heartbeats would have committed
	t.Logf("log grew by %d entries in %v (heartbeats: ~%d)", grown, 3*tm.Lease, renewals)
	if grown > renewals/4 {
		t.Errorf("the log grew by %d entries over %v of an idle 3-node cluster; heartbeats would have added ~%d", grown, 3*tm.Lease, renewals)
	}
	for _, n := range []*Node{a, b, c} {
		h := n.Health()
		if h.LeaseRemaining <= 0 || time.Since(h.LastRenewal) > tm.Lease {
			t.Errorf("%s: lease remaining %v, last renewal %v ago", n.ID(), h.LeaseRemaining, time.Since(h.LastRenewal))
		}
		for _, m := range n.Members() {
			if m.ID == n.ID() && time.Since(m.UpdatedAt) > tm.Lease {
				t.Errorf("%s shows its own last renewal %v ago", n.ID(), time.Since(m.UpdatedAt))
			}
		}
	}
}
