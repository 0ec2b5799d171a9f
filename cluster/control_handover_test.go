package cluster

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// A leader's planned stop hands leadership to a live voter (the first in id
// order that gossip reports alive) and returns once that voter leads; with
// no other voter alive in gossip it hands over to nobody and returns at
// once rather than aiming raft's transfer at a dead peer.
func TestHandOverLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 7)
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		leader := h.waitLeader(30 * time.Second)

		// A follower hands nothing over.
		for _, n := range h.running() {
			if n == leader {
				continue
			}
			if to, err := n.g.HandOverLeadership(context.Background()); to != "" || err != nil {
				t.Fatalf("follower %s: HandOverLeadership = %q, %v; want \"\", nil", n.id, to, err)
			}
		}

		// The first live voter in id order is chosen; a voter gossip
		// reports dead is skipped.
		var live []string
		for _, id := range []string{"n1", "n2", "n3"} {
			if id != leader.id {
				live = append(live, id)
			}
		}
		h.gossip.state(live[0], StateDead, gossip.EventFailed)
		start := time.Now()
		to, err := leader.g.HandOverLeadership(context.Background())
		if err != nil || to != live[1] {
			t.Fatalf("HandOverLeadership = %q, %v; want %q, nil (%s is dead in gossip)", to, err, live[1], live[0])
		}
		took := time.Since(start)
		if leader.g.IsLeader() {
			t.Fatalf("%s still leads after handing over to %s", leader.id, to)
		}
		next := h.waitLeader(30 * time.Second)
		if next.id != to {
			t.Fatalf("leader after the handover is %s, want %s", next.id, to)
		}
		// A handover is a TimeoutNow round, not an election timeout.
		if et := TestControlConfig().ElectionTimeout; took >= et {
			t.Errorf("the handover took %v (virtual), want less than an election timeout (%v)", took, et)
		}

		// With every other voter dead in gossip, no handover is tried.
		h.gossip.state(leader.id, StateDead, gossip.EventFailed)
		h.gossip.state(live[0], StateDead, gossip.EventFailed)
		if to, err := next.g.HandOverLeadership(context.Background()); to != "" || err != nil {
			t.Fatalf("HandOverLeadership with no live voter = %q, %v; want \"\", nil", to, err)
		}
		if !next.g.IsLeader() {
			t.Fatalf("%s stopped leading without a handover", next.id)
		}
	})
}
