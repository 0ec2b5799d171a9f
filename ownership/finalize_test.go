package ownership

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// The leader finalizes a newer cluster version only when every node that
// counts speaks it: a node of the previous release whose lease lapsed but
// that gossip still shows up at its registered incarnation blocks it (its
// replica would halt at the ClusterConfig); once gossip says it is dead,
// or it restarted as another incarnation, it no longer does.
func TestFinalizeWaitsForGossipUpNodes(t *testing.T) {
	cfg := TestConfig()
	cfg.ClusterName, cfg.Ring.Partitions = "c", 2
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	newest, old := ledger.MaxClusterVersion, ledger.MaxClusterVersion-1
	rec := func(id string, liveness, hi uint32) ledger.NodeRecord {
		return ledger.NodeRecord{ID: id, Incarnation: 1, Liveness: uint64(liveness), Seq: 5, MinVersion: 1, MaxVersion: hi}
	}
	members := func(n3 member.State) []Member {
		return []Member{{ID: "n1", Incarnation: 1, State: member.Alive, Health: 1},
			{ID: "n2", Incarnation: 1, State: member.Alive, Health: 1},
			{ID: "n3", Incarnation: 1, State: n3, Health: 1}}
	}
	shards := []ledger.ShardRecord{
		{Shard: 0, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned},
		{Shard: 1, Epoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned},
	}
	in := Input{Members: members(member.Alive), Shards: shards,
		Nodes:   []ledger.NodeRecord{rec("n1", 1, newest), rec("n2", 1, newest), rec("n3", 1, old)},
		Cluster: ledger.ClusterInfo{Name: "c", Partitions: 2, Version: old}}
	p.Establish(t0, in, t0)
	finalizes := func(now time.Time, in Input) bool {
		t.Helper()
		for _, id := range []string{"n1", "n2"} {
			if err := p.Renew(now, rec(id, 1, newest), 1, 1); err != nil {
				t.Fatal(err)
			}
		}
		cmds, err := p.Plan(now, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if cc, ok := c.(ledger.ClusterConfig); ok && cc.Version > old {
				return true
			}
		}
		return false
	}
	now := t0.Add(time.Second)
	if finalizes(now, in) {
		t.Fatal("finalized while n3, holding a lease, speaks only the older version")
	}
	// n3's lease lapsed and the leader expired it (its liveness moved), but
	// gossip shows it up: still running the previous release.
	in.Nodes = []ledger.NodeRecord{rec("n1", 1, newest), rec("n2", 1, newest), rec("n3", 2, old)}
	now = now.Add(cfg.ExpireAfter() + time.Second)
	if finalizes(now, in) {
		t.Fatal("finalized past n3: expired, but gossip shows it up at its registered incarnation")
	}
	// Gossip: n3 is dead. Nothing of the previous release runs.
	in.Members = members(member.Dead)
	now = now.Add(time.Second)
	if !finalizes(now, in) {
		t.Fatal("did not finalize with n3 expired and dead in gossip")
	}
}
