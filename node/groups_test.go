package node

import (
	"slices"
	"testing"
)

// Group-scoped elections on the real stack: two groups in one cluster each
// get their own leader, always from their own members, and the leadership
// moves within the group when its holder drains or dies.
func TestClusterGroupElections(t *testing.T) {
	groupOf := map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "b"}
	tc := newCluster(t, 4, func(i int, c *Config) { c.Group = groupOf[c.NodeID] })
	ctx := tc.ctx()
	elections := map[string]*Election{}
	for _, n := range tc.nodes {
		e, err := n.GroupElection(ctx, "indexer")
		if err != nil {
			t.Fatalf("%s: %v", n.ID(), err)
		}
		if e.Group() != groupOf[n.ID()] {
			t.Fatalf("%s: election in group %q", n.ID(), e.Group())
		}
		elections[n.ID()] = e
	}
	// Every node of a group sees the same dedicated shard; the groups'
	// shards differ and lie past the key shards.
	sa, sb := elections["n1"].Shard(), elections["n3"].Shard()
	if elections["n2"].Shard() != sa || elections["n4"].Shard() != sb || sa == sb ||
		sa < uint32(tc.nodes[0].Partitions()) || sb < uint32(tc.nodes[0].Partitions()) {
		t.Fatalf("election shards: n1 %d n2 %d n3 %d n4 %d", sa, elections["n2"].Shard(), sb, elections["n4"].Shard())
	}
	// waitLeader waits until a member of group (other than avoid) acts as
	// the leader of the group's election at an epoch above after.
	waitLeader := func(group string, after uint64, avoid string) string {
		t.Helper()
		var leader string
		if !waitTrue(ctx, func() bool {
			for _, n := range tc.nodes {
				if n == nil || n.isClosed() || n.ID() == avoid || groupOf[n.ID()] != group {
					continue
				}
				if tok, err := elections[n.ID()].Token(); err == nil && tok.Epoch > after {
					leader = n.ID()
					return true
				}
			}
			return false
		}) {
			t.Fatalf("group %q: no leader", group)
		}
		return leader
	}
	leaderA, leaderB := waitLeader("a", 0, ""), waitLeader("b", 0, "")
	// The committed owner of each group's shard is a member of the group
	// (checked from every node's replica, once it has applied the grants:
	// replicas lag the leader).
	for _, n := range tc.nodes {
		if !waitTrue(ctx, func() bool { return n.Shard(sa).Owner != "" && n.Shard(sb).Owner != "" }) {
			t.Fatalf("%s: replica never saw both groups' shards granted", n.ID())
		}
		if a, b := n.Shard(sa).Owner, n.Shard(sb).Owner; groupOf[a] != "a" || groupOf[b] != "b" {
			t.Fatalf("%s: group a's shard owned by %q, group b's by %q", n.ID(), a, b)
		}
	}
	for _, n := range tc.nodes {
		// Every node, whatever its group, agrees on who leads its group.
		want := map[string]string{"a": leaderA, "b": leaderB}[groupOf[n.ID()]]
		if !waitTrue(ctx, func() bool { return elections[n.ID()].Leader() == want }) {
			t.Fatalf("%s sees leader %q, want %q", n.ID(), elections[n.ID()].Leader(), want)
		}
	}

	// Drain group a's leader: the election moves to a's other member.
	tokA, err := elections[leaderA].Token()
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.byID(leaderA).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	nextA := waitLeader("a", tokA.Epoch, leaderA)
	if nextA == leaderA {
		t.Fatalf("group a's leadership stayed on the drained %s", leaderA)
	}

	// Kill group b's leader (no leave, no handover): after its lease the
	// election moves to b's other member.
	tokB, err := elections[leaderB].Token()
	if err != nil {
		t.Fatal(err)
	}
	tc.byID(leaderB).kill()
	nextB := waitLeader("b", tokB.Epoch, leaderB)
	if nextB == leaderB || !slices.Contains([]string{"n3", "n4"}, nextB) {
		t.Fatalf("group b's leadership went to %s after %s died", nextB, leaderB)
	}
	t.Logf("group a: %s -> %s (drain); group b: %s -> %s (crash)", leaderA, nextA, leaderB, nextB)
}
