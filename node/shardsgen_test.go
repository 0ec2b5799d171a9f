package node

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestShardsGenerationMovesWithShards samples three real nodes every 50 ms
// of virtual time, each sample taken with the bubble at rest (every
// refresh done): a node whose ShardsGeneration did not move answers
// Shards the same (but for LeaseRemaining), at rest the number stays put,
// and a follower cut off from the control group (its acting set empties
// with no entry applied) and a drain move it.
func TestShardsGenerationMovesWithShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(1)
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
		defer func() {
			// Bounded: a node cut off from the control group cannot drain.
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			for _, n := range nodes {
				_ = n.Close(cctx)
			}
			// memberlist's in-flight probes end only on their own timers
			// (see TestStartWipedDataDirReusingID): let them pass.
			time.Sleep(time.Minute)
		}()
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		type sample struct {
			gen    uint64
			shards []ShardInfo
		}
		take := func(n *Node) sample {
			s := sample{gen: n.ShardsGeneration()}
			s.shards = n.Shards()
			for i := range s.shards {
				s.shards[i].LeaseRemaining = 0
			}
			return s
		}
		last := map[*Node]sample{}
		moved := map[*Node]int{}
		step := func(live []*Node) {
			t.Helper()
			time.Sleep(50 * time.Millisecond)
			synctest.Wait()
			for _, n := range live {
				s := take(n)
				if p, ok := last[n]; ok {
					if s.gen == p.gen && !slices.Equal(s.shards, p.shards) {
						t.Fatalf("%s: Shards changed at generation %d:\nbefore %+v\nafter  %+v", n.ID(), s.gen, p.shards, s.shards)
					}
					if s.gen != p.gen {
						moved[n]++
					}
				}
				last[n] = s
			}
		}
		// At rest: 2 s, eight renewal periods of the fast profile.
		for range 40 {
			step(nodes)
		}
		for _, n := range nodes {
			if moved[n] != 0 {
				t.Errorf("%s: ShardsGeneration moved %d times at rest", n.ID(), moved[n])
			}
		}
		// Cut a follower off the control group: its renewals fail and it
		// stops acting on its shards with no entry applied (its replica
		// gets none); the others take them over.
		leader := nodes[0].Status().ControlLeader
		var victim, other *Node
		for _, n := range nodes {
			switch {
			case n.ID() == leader:
			case victim == nil:
				victim = n
			default:
				other = n
			}
		}
		if victim == nil || other == nil {
			t.Fatalf("leader %q: want two followers", leader)
		}
		vaddr := victim.cfg.RaftAddr
		for _, n := range nodes {
			if n != victim {
				tr.Raft.Cut(vaddr, n.cfg.RaftAddr)
				tr.Raft.Cut(n.cfg.RaftAddr, vaddr)
			}
		}
		for range 100 {
			step(nodes)
		}
		for _, n := range nodes {
			if moved[n] == 0 {
				t.Errorf("%s: ShardsGeneration did not move when %s was cut off", n.ID(), victim.ID())
			}
		}
		if len(victim.Owned()) != 0 {
			t.Errorf("%s still acts on %d shards 5 s after it was cut off", victim.ID(), len(victim.Owned()))
		}
		for _, s := range other.Shards() {
			if s.Owner == victim.ID() || !s.Valid {
				t.Fatalf("%s: shard %d still %s (valid %v) 5 s after %s was cut off", other.ID(), s.Shard, s.Owner, s.Valid, victim.ID())
			}
		}
		clear(moved)
		if r := other.Health(); slices.Contains(r.Reasons, "draining") {
			t.Fatalf("%s reports draining before its drain: %v", other.ID(), r.Reasons)
		}
		drained := make(chan error, 1)
		go func() { drained <- other.Drain(ctx) }()
		for range 100 {
			step(nodes)
		}
		if err := <-drained; err != nil {
			t.Fatalf("drain %s: %v", other.ID(), err)
		}
		if moved[other] == 0 {
			t.Errorf("%s: ShardsGeneration did not move on its drain", other.ID())
		}
		if r := other.Health(); r.Status != Degraded || !slices.Contains(r.Reasons, "draining") {
			t.Errorf("%s after its drain: health %v %v, want degraded, draining", other.ID(), r.Status, r.Reasons)
		}
	})
}
