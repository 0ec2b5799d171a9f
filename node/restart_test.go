package node

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// TestMemberFailoverAndRestart measures, in virtual time (testing/synctest:
// protocol waits only, no CPU), a disk-less member on the stream killed
// while it owns shards — until every shard it owned is validly owned by
// another node — and then restarted, until it acts on a shard again (its
// own replica shows it the valid owner). Default profile, cluster version
// 5. The restarted member never runs Raft.
func TestMemberFailoverAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(5)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cfgs := []Config{memNetConfig(tr, 0, 5), memNetConfig(tr, 1, 5), memNetConfig(tr, 2, 5),
			disklessConfig(tr, 3, 5), disklessConfig(tr, 4, 5)}
		for i := range cfgs {
			cfgs[i].BootstrapExpect = 3
			cfgs[i].Profile = ProfileDefault
			cfgs[i].Partitions = 64
		}
		nodes := startAll(t, ctx, cfgs)
		defer func() {
			for i := len(nodes) - 1; i >= 0; i-- {
				if nodes[i] != nil {
					_ = nodes[i].Close(ctx)
				}
			}
		}()
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		if !waitTrue(ctx, func() bool {
			return nodes[0].be.(*netBackend).fsm.State().VersionActive(ledger.VersionStreamMembers) &&
				owned2(nodes[0], "n4") > 0 && !hasRaft(nodes[3])
		}) {
			t.Fatalf("n4 owns %d shards, raft %v", owned2(nodes[0], "n4"), hasRaft(nodes[3]))
		}
		mine := map[uint32]bool{}
		for _, s := range nodes[0].Shards() {
			if s.Owner == "n4" {
				mine[s.Shard] = true
			}
		}
		t0 := time.Now()
		tr.Crash(nodes[3])
		nodes[3] = nil
		if !waitTrue(ctx, func() bool {
			for _, s := range nodes[0].Shards() {
				if mine[s.Shard] && (s.Owner == "n4" || !s.Valid) {
					return false
				}
			}
			return true
		}) {
			t.Fatal("n4's shards never moved")
		}
		failover := time.Since(t0)

		t1 := time.Now()
		if testing.Verbose() {
			cfgs[3].Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		n4, err := Start(ctx, cfgs[3])
		if err != nil {
			t.Fatalf("restart n4: %v", err)
		}
		nodes[3] = n4
		started := time.Since(t1)
		if hasRaft(n4) {
			t.Error("a member restarted at cluster version 5 runs raft")
		}
		if !waitTrue(ctx, func() bool { return owned2(n4, "n4") > 0 }) {
			t.Fatal("restarted n4 never owns a shard")
		}
		acting := time.Since(t1)
		lease := n4.timing.Lease
		t.Logf("member kill → its %d shards owned by others: %v (lease %v); restart → started %v, → owning a shard in its own replica %v",
			len(mine), failover, lease, started, acting)
		if hasRaft(n4) {
			t.Error("the restarted member started raft")
		}
		// Protocol time, not machine speed (synctest): the goal
		// is restart → acting ≤ 1 s; before QueueMeta the registration's
		// two gossip broadcast waits alone took 600–800 ms.
		if acting > time.Second {
			t.Errorf("restart → acting took %v of protocol time, want ≤ 1s", acting)
		}
	})
}

func hasRaft(n *Node) bool { return n.be.(*netBackend).ctl.(*clusterControl).g.HasRaft() }
