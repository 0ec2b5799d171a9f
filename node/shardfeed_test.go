package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// shardsReader keeps a copy of a node's Shards updated from ShardsSince,
// as the API's metrics sampler does.
type shardsReader struct {
	mu         sync.Mutex
	gen        uint64
	recs       map[uint32]ShardInfo
	incr, full int
}

func (r *shardsReader) sync(n *Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gen, changed, ok := n.ShardsSince(r.gen)
	if !ok || r.recs == nil {
		r.gen = n.ShardsGeneration()
		r.recs = map[uint32]ShardInfo{}
		for _, s := range n.Shards() {
			r.recs[s.Shard] = s
		}
		r.full++
		return
	}
	for _, s := range changed {
		r.recs[s.Shard] = s
	}
	r.gen = gen
	r.incr++
}

// diff compares the copy with a fresh Shards (LeaseRemaining aside).
func (r *shardsReader) diff(n *Node) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := n.Shards()
	if len(all) != len(r.recs) {
		return fmt.Errorf("%d shards in the copy, %d in Shards", len(r.recs), len(all))
	}
	for _, s := range all {
		got := r.recs[s.Shard]
		got.LeaseRemaining, s.LeaseRemaining = 0, 0
		if got != s {
			return fmt.Errorf("shard %d: copy %+v, Shards %+v", s.Shard, got, s)
		}
	}
	return nil
}

// TestShardsSinceEqualsShards: a reader that re-reads only the shards
// ShardsSince names holds what Shards answers, while shards move between
// three nodes (drains, undrains, a fourth node joining and crashing):
// node.refresh re-checks only the shards the ledger's change feed names,
// and ShardsSince reports what each refresh re-checked. Compared once the
// cluster is quiet after each step (a missed change would stay wrong).
func TestShardsSinceEqualsShards(t *testing.T) {
	net := NewMemNetwork()
	parts := func(c *Config) { c.Partitions = 64 }
	nodes := []*Node{startMem(t, net, "n1", parts)}
	nodes = append(nodes, startMem(t, net, "n2", parts), startMem(t, net, "n3", parts))
	readers := []*shardsReader{{}, {}, {}}
	views := []*eventView{{}, {}, {}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, v := range views {
		sub := nodes[i].Subscribe(1 << 16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			v.follow(sub, stop)
		}()
	}
	for i, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r.sync(nodes[i])
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// quiet waits until no node's ShardsGeneration or applied index moved
	// for a while and every shard has a valid owner, then compares.
	check := func(step string) {
		t.Helper()
		for _, n := range nodes {
			if err := n.WaitSettled(testCtx(t)); err != nil {
				t.Fatalf("%s: %s: %v", step, n.ID(), err)
			}
		}
		deadline := time.Now().Add(testTimeout)
		var last string
		stable := 0
		for stable < 20 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the cluster did not settle (last %s)", step, last)
			}
			var sb string
			for _, n := range nodes {
				owned := 0
				for _, s := range n.Shards() {
					if s.Valid && s.State == ShardOwned {
						owned++
					}
				}
				sb += fmt.Sprintf("%d/%d/%d ", n.ShardsGeneration(), n.Status().AppliedIndex, owned)
			}
			if sb == last {
				stable++
			} else {
				stable = 0
			}
			last = sb
			time.Sleep(10 * time.Millisecond) // a poll interval, not a wait for an outcome
		}
		t.Logf("%s: settled at %s", step, last)
		for i, r := range readers {
			r.sync(nodes[i])
			if err := r.diff(nodes[i]); err != nil {
				t.Fatalf("%s: %s's reader: %v", step, nodes[i].ID(), err)
			}
			if err := views[i].diff(nodes[i]); err != nil {
				t.Fatalf("%s: %s's events: %v", step, nodes[i].ID(), err)
			}
		}
	}
	check("start")
	ctx := testCtx(t)
	dctx, cancel := context.WithTimeout(ctx, testTimeout)
	if err := nodes[1].Drain(dctx); err != nil {
		t.Fatalf("drain n2: %v", err)
	}
	cancel()
	check("n2 drained")
	if err := nodes[1].Undrain(ctx); err != nil {
		t.Fatalf("undrain n2: %v", err)
	}
	if err := nodes[0].waitFor(ctx, func() bool { return len(nodes[1].Owned()) > 0 }); err != nil {
		t.Fatalf("no shard moved back to n2: %v", err)
	}
	check("n2 undrained")
	n4 := startMem(t, net, "n4", parts)
	if err := nodes[0].waitFor(ctx, func() bool { return len(n4.Owned()) > 0 }); err != nil {
		t.Fatalf("no shard moved to n4: %v", err)
	}
	check("n4 joined")
	n4.kill()
	if err := nodes[0].waitFor(ctx, func() bool {
		for _, s := range nodes[0].Shards() {
			if s.Owner == "n4" && s.Valid {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("n4's shards were not taken over: %v", err)
	}
	check("n4 crashed")
	for i, r := range readers {
		r.mu.Lock()
		t.Logf("%s: %d syncs from the feed, %d full reads", nodes[i].ID(), r.incr, r.full)
		if r.incr == 0 {
			t.Errorf("%s: no sync was served from the feed", nodes[i].ID())
		}
		r.mu.Unlock()
	}
}

// eventView is the table a subscriber builds from ownership events.
type eventView struct {
	mu      sync.Mutex
	owner   map[uint32]string
	acting  map[uint32]bool
	dropped uint64
}

func (v *eventView) follow(sub *Subscription[Event], stop <-chan struct{}) {
	v.mu.Lock()
	v.owner, v.acting = map[uint32]string{}, map[uint32]bool{}
	v.mu.Unlock()
	for {
		select {
		case <-stop:
			return
		case ev, ok := <-sub.C():
			if !ok {
				return
			}
			v.mu.Lock()
			switch ev.Kind {
			case OwnerChanged:
				v.owner[ev.Shard] = ev.Owner
			case ShardAcquired:
				v.acting[ev.Shard] = true
			case ShardLost:
				v.acting[ev.Shard] = false
			}
			v.dropped = sub.Dropped()
			v.mu.Unlock()
		}
	}
}

// diff compares the events' table with Shards: the valid owner and
// whether this node acts, per shard.
func (v *eventView) diff(n *Node) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dropped > 0 {
		return fmt.Errorf("%d events dropped", v.dropped)
	}
	for _, s := range n.Shards() {
		owner := ""
		if s.State != ShardUnowned && s.Valid {
			owner = s.Owner
		}
		if v.owner[s.Shard] != owner || v.acting[s.Shard] != s.Acting {
			return fmt.Errorf("shard %d: events say owner %q acting %v, Shards %q acting %v (%+v)",
				s.Shard, v.owner[s.Shard], v.acting[s.Shard], owner, s.Acting, s)
		}
	}
	return nil
}
