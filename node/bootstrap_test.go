package node

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestBootstrapExpectOneJoinsSeeds: a node started with BootstrapExpect 1
// and the seeds of a running cluster joins that cluster: it asks the
// seeds first and bootstraps only when no cluster answers. Before, its
// control group started before gossip had joined, saw itself alone and
// formed a second control group with itself as its only voter (which the
// real leader's log then overwrote).
func TestBootstrapExpectOneJoinsSeeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(21)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cfgs := []Config{memNetConfig(tr, 0, 3), memNetConfig(tr, 1, 3), memNetConfig(tr, 2, 3)}
		nodes := startAll(t, ctx, cfgs)
		defer func() {
			for i := len(nodes) - 1; i >= 0; i-- {
				_ = nodes[i].Close(ctx)
			}
		}()
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		// n0 sorts before every running node: were it to bootstrap on
		// what it sees, it would choose itself.
		late := memNetConfig(tr, 3, 4)
		late.NodeID = "n0"
		late.BootstrapExpect = 1
		late.Seeds = cfgs[0].Seeds
		logs := &lockedLog{}
		late.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		// A real network's join takes a round trip or more: the gap in
		// which the control group bootstrapped alone.
		for _, seed := range late.Seeds {
			tr.Gossip.SetLink(late.GossipAddr, seed, 300*time.Millisecond, 0)
		}
		n0, err := Start(ctx, late)
		if err != nil {
			t.Fatalf("start n0: %v", err)
		}
		nodes = append(nodes, n0)
		if err := n0.WaitSettled(ctx); err != nil {
			t.Fatalf("n0 not settled: %v", err)
		}
		want := []string{"n1", "n2", "n3"}
		if got := n0.be.(*netBackend).ctl.Voters(); !slices.Equal(got, want) {
			t.Fatalf("n0's control group has voters %v, want the running cluster's %v", got, want)
		}
		if l := logs.tail(1 << 20); strings.Contains(l, "bootstrapped control group") {
			t.Fatalf("n0 bootstrapped a control group of its own:\n%s", l)
		}
	})
}
