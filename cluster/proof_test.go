package cluster

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// TestGossipIDTakeoverIgnored: a process with the gossip key gossips a
// voter's id at a dead Raft address, and a new id at a crashed voter's
// address. Before, the reconciler moved the voter to the dead address and
// removed the crashed voter for the new id; now neither claim is proven
// over TLS, so the configuration stays as it was, and the leader reports
// both as unproven.
func TestGossipIDTakeoverIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	p := newTestPKI(t)
	h := newSecureHarness(t, p)
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
	leader := h.waitLeader(30 * time.Second)
	before, err := leader.g.Servers()
	if err != nil {
		t.Fatal(err)
	}
	// The victims: a follower whose address is hijacked in gossip and one
	// that crashes and whose address a new id claims.
	var victims []*testNode
	for _, n := range h.running() {
		if n != leader {
			victims = append(victims, n)
		}
	}
	moved, crashed := victims[0], victims[1]
	h.stop(crashed.id)
	h.gossip.state(crashed.id, StateDead, gossip.EventFailed)
	dead := "127.0.0.1:1" // nothing listens there
	h.gossip.set(Member{Meta: Meta{ID: moved.id, RaftAddr: dead, Incarnation: moved.inc + 100}, Addr: dead, State: StateAlive}, gossip.EventUpdate)
	h.gossip.set(Member{Meta: Meta{ID: "evil", RaftAddr: crashed.addr, Incarnation: 1}, Addr: crashed.addr, State: StateAlive}, gossip.EventJoin)
	want := []string{"evil@" + crashed.addr, moved.id + "@" + dead}
	waitFor(t, 30*time.Second, "the leader to report both claims as unproven", func() bool {
		return slices.Equal(leader.g.Unproven(), want)
	})
	signal(leader.g.reconcileSig) // one more round with both claims in view
	waitFor(t, 30*time.Second, "another reconcile round", func() bool {
		return slices.Equal(leader.g.Unproven(), want)
	})
	after, err := leader.g.Servers()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("gossip alone changed the Raft configuration:\nbefore %+v\nafter  %+v", before, after)
	}
	if l := h.leader(); l != leader {
		t.Fatalf("leadership moved from %s", leader.id)
	}
	// The real node proves itself again: gossip back at its address.
	h.gossip.set(Member{Meta: Meta{ID: moved.id, RaftAddr: moved.addr, Incarnation: moved.inc + 101}, Addr: moved.addr, State: StateAlive}, gossip.EventUpdate)
	waitFor(t, 30*time.Second, "the real member proven again", func() bool {
		return slices.Equal(leader.g.Unproven(), []string{"evil@" + crashed.addr})
	})
}

// TestPlanReconcileIgnoresUnproven: the pure rule: an unproven member is
// neither added, nor moves a server's address, nor takes over an address.
func TestPlanReconcileIgnoresUnproven(t *testing.T) {
	servers := []ServerInfo{{ID: "n1", Addr: "a1", Voter: true}, {ID: "n2", Addr: "a2", Voter: true}, {ID: "n3", Addr: "a3", Voter: true}}
	members := []Member{
		{Meta: Meta{ID: "n1", RaftAddr: "a1"}, State: StateAlive},
		{Meta: Meta{ID: "n2", RaftAddr: "dead"}, State: StateAlive}, // hijacked
		{Meta: Meta{ID: "n3", RaftAddr: "a3"}, State: StateDead},
		{Meta: Meta{ID: "evil", RaftAddr: "a3"}, State: StateAlive},
		{Meta: Meta{ID: "n4", RaftAddr: "a4"}, State: StateAlive},
	}
	st := reconcileState{Self: "n1", Servers: servers, Members: members, MaxVoters: 3, Now: time.Unix(100, 0)}
	if got := planReconcile(st); len(got) != 4 {
		t.Fatalf("without proofs (no authentication) gossip is trusted: want the move, the takeover and two joins, got %v", got)
	}
	st.Proven = map[string]bool{"n1": true, "n4": true}
	got := planReconcile(st)
	if len(got) != 1 || got[0].Kind != changeAddNonvoter || got[0].ID != "n4" {
		t.Fatalf("with only n4 proven: %v, want only n4 added", got)
	}
	// A revoked voter leaves the configuration at once (not after
	// DeadVoterTimeout), and a revoked member is never added; the leader
	// itself is never removed by it.
	st.Revoked = map[string]bool{"n2": true, "n4": true, "n1": true}
	got = planReconcile(st)
	if len(got) != 1 || got[0].Kind != changeRemove || got[0].ID != "n2" || got[0].Reason != "revoked" {
		t.Fatalf("with n2 and n4 revoked: %v, want only n2 removed (revoked)", got)
	}
}
