package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// memNetConfig is node i of an n-node cluster on tr.
func memNetConfig(tr *MemNetwork, i, n int) Config {
	cfg := ConfigFromEnv(func(string) string { return "" })
	cfg.NodeID = fmt.Sprintf("n%d", i+1)
	cfg.Profile = ProfileFast
	cfg.Partitions = 8
	cfg.BootstrapExpect = min(n, 3)
	cfg.GossipAddr = fmt.Sprintf("10.0.0.%d:7946", i+1)
	cfg.RaftAddr = fmt.Sprintf("10.0.0.%d:7947", i+1)
	for j := range n {
		cfg.Seeds = append(cfg.Seeds, fmt.Sprintf("10.0.0.%d:7946", j+1))
	}
	cfg.Network = tr
	return cfg
}

// TestMemNetworkCrashRestart runs three real nodes in a synctest bubble:
// they settle, one crashes, the others take its shards over, and it
// restarts with its log and the next incarnation.
func TestMemNetworkCrashRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(1)
		var mu sync.Mutex
		applied := map[string]uint64{}
		tr.OnApply = func(node string, _ uint64, index uint64, _ ledger.Command, _ ledger.Result) {
			mu.Lock()
			applied[node] = max(applied[node], index)
			mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		nodes := make([]*Node, 3)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range nodes {
			wg.Go(func() { nodes[i], errs[i] = Start(ctx, memNetConfig(tr, i, 3)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("start n%d: %v", i+1, err)
			}
		}
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		tr.Crash(nodes[0])
		if err := nodes[1].waitFor(ctx, func() bool {
			for _, s := range nodes[1].Shards() {
				if s.Owner == "n1" || !s.Valid || s.State != ShardOwned {
					return false
				}
			}
			return true
		}); err != nil {
			t.Fatalf("shards not taken over after crash: %v", err)
		}
		n1, err := Start(ctx, memNetConfig(tr, 0, 3))
		if err != nil {
			t.Fatalf("restart n1: %v", err)
		}
		if n1.Incarnation() != 2 {
			t.Errorf("restarted incarnation %d, want 2", n1.Incarnation())
		}
		mu.Lock()
		if applied["n1"] == 0 || applied["n2"] == 0 {
			t.Errorf("OnApply saw %v", applied)
		}
		mu.Unlock()
		for _, n := range []*Node{n1, nodes[1], nodes[2]} {
			if err := n.Close(ctx); err != nil {
				t.Errorf("close %s: %v", n.ID(), err)
			}
		}
	})
}

func TestMemNetworkValidate(t *testing.T) {
	cfg := memNetConfig(seededNetwork(1), 0, 1)
	cfg.GossipAddr = "localhost:1"
	cfg.RaftAdvertise = "10.0.0.1:2"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a host name and an advertise address with Network")
	}
	for _, want := range []string{"GossipAddr \"localhost:1\"", "RaftAdvertise"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// seededNetwork is a MemNetwork whose networks draw from seed.
func seededNetwork(seed int64) *MemNetwork {
	return &MemNetwork{Gossip: cluster.NewMemNetwork(seed), Raft: cluster.NewRaftMemNetwork(seed)}
}

// TestMemNetworkPlace: the network gives each node id its own addresses
// (the same at every start), seeds later nodes with the earlier ones, lets
// only the first form the cluster, and keeps what the caller set.
func TestMemNetworkPlace(t *testing.T) {
	net := NewMemNetwork()
	cfg := func(id string) Config {
		c := DefaultConfig()
		c.NodeID, c.Network, c.Profile = id, net, ""
		return c
	}
	a := net.place(cfg("a"))
	b := net.place(cfg("b"))
	a2 := net.place(cfg("a"))
	if a.GossipAddr == b.GossipAddr || a.RaftAddr == b.RaftAddr || a.GossipAddr == a.RaftAddr {
		t.Fatalf("addresses not distinct: a %s %s, b %s %s", a.GossipAddr, a.RaftAddr, b.GossipAddr, b.RaftAddr)
	}
	if a2.GossipAddr != a.GossipAddr || a2.RaftAddr != a.RaftAddr {
		t.Fatalf("restart of a moved: %s %s, was %s %s", a2.GossipAddr, a2.RaftAddr, a.GossipAddr, a.RaftAddr)
	}
	if len(a.Seeds) != 0 || a.BootstrapExpect != 1 {
		t.Fatalf("first node: seeds %v, BootstrapExpect %d; want none, 1", a.Seeds, a.BootstrapExpect)
	}
	if len(b.Seeds) != 1 || b.Seeds[0] != a.GossipAddr || b.BootstrapExpect != DefaultBootstrapExpect {
		t.Fatalf("second node: seeds %v, BootstrapExpect %d; want [%s], %d", b.Seeds, b.BootstrapExpect, a.GossipAddr, DefaultBootstrapExpect)
	}
	if len(a2.Seeds) != 1 || a2.Seeds[0] != b.GossipAddr {
		t.Fatalf("restarted a: seeds %v, want [%s]", a2.Seeds, b.GossipAddr)
	}
	if a.Profile != ProfileFast {
		t.Fatalf("empty profile became %q, want %q", a.Profile, ProfileFast)
	}
	for _, c := range []Config{a, b} {
		if err := c.Validate(); err != nil {
			t.Fatalf("placed config invalid: %v", err)
		}
	}
	explicit := memNetConfig(net, 0, 3)
	if got := net.place(explicit); got.GossipAddr != explicit.GossipAddr || !slices.Equal(got.Seeds, explicit.Seeds) || got.BootstrapExpect != explicit.BootstrapExpect {
		t.Fatalf("explicit addresses changed: %+v", got)
	}
}
