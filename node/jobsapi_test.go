package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// startMemTrio starts three nodes on one MemNetwork and waits until they
// settled and the cluster runs ledger.VersionJobsAPI.
func startMemTrio(t *testing.T, mod func(*Config)) []*Node {
	t.Helper()
	ctx := testCtx(t)
	net := NewMemNetwork()
	var nodes []*Node
	for _, id := range []string{"a", "b", "c"} {
		nodes = append(nodes, startMem(t, net, id, func(c *Config) { c.Profile = ProfileFast; mod(c) }))
	}
	for _, n := range nodes {
		if err := n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !waitTrue(ctx, func() bool {
		for _, n := range nodes {
			if !n.be.versionActive(ledger.VersionJobsAPI) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("cluster version %d never became active", ledger.VersionJobsAPI)
	}
	return nodes
}

// TestEnqueueCapExactAcrossNodes: with MaxPendingJobs 5, 30 concurrent
// enqueues of new keys on one shard through three nodes create exactly 5
// jobs; the others fail with ErrQueueFull. The ledger decides on the
// committed state (cluster version 5), so no enqueue overshoots.
func TestEnqueueCapExactAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	const limit = 5
	nodes := startMemTrio(t, func(c *Config) { c.MaxPendingJobs = limit })
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, full := 0, 0
	var other []error
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, c, err := nodes[i%3].Enqueue(ctx, JobSpec{Key: fmt.Sprintf("k%d", i), ShardKey: "tenant-1", Type: "t"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && c:
				created++
			case errors.Is(err, ErrQueueFull):
				full++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected answers: %v", other)
	}
	if err := nodes[0].ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	shard := nodes[0].ShardFor("tenant-1")
	pending := len(nodes[0].Jobs(JobQuery{Shards: []uint32{shard}, States: []JobState{JobPending}}))
	if created != limit || full != 30-limit || pending != limit {
		t.Fatalf("created %d, refused %d, pending %d: want exactly %d created and pending", created, full, pending, limit)
	}
	// A duplicate of an existing key is still answered on the full shard.
	if _, c, err := nodes[1].Enqueue(ctx, JobSpec{Key: "k0", ShardKey: "tenant-1", Type: "t"}); err != nil && !errors.Is(err, ErrQueueFull) {
		t.Fatal(err)
	} else if err == nil && c {
		t.Fatal("a duplicate created a job")
	}
}

// TestEnqueueRequestID: an Enqueue retried with its request id through
// another node answers the first try (created true, the same job), a
// keyless one creates one job, and the id with another spec fails with
// ErrRequestIDReused and creates nothing.
func TestEnqueueRequestID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	nodes := startMemTrio(t, func(*Config) {})
	ctx := testCtx(t)
	id := NewRequestID()
	spec := JobSpec{Type: "mail", Payload: []byte("hi"), RequestID: id}
	j1, c1, err := nodes[0].Enqueue(ctx, spec)
	if err != nil || !c1 {
		t.Fatalf("first: %v created %v", err, c1)
	}
	j2, c2, err := nodes[2].Enqueue(ctx, spec)
	if err != nil || !c2 || j2.ID != j1.ID {
		t.Fatalf("retry: job %d created %v err %v, want job %d created", j2.ID, c2, err, j1.ID)
	}
	other := spec
	other.Payload = []byte("bye")
	if _, _, err := nodes[1].Enqueue(ctx, other); !errors.Is(err, ErrRequestIDReused) {
		t.Fatalf("another body with the id: %v, want ErrRequestIDReused", err)
	}
	if err := nodes[1].ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(nodes[1].Jobs(JobQuery{})); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	// A member that never votes retries through the leader too, and its
	// read barrier asks the leader.
	member := startMem(t, nodes[0].cfg.Network, "m", func(c *Config) { c.Profile, c.Voter = ProfileFast, VoterNever })
	if err := member.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	j3, c3, err := member.Enqueue(ctx, spec)
	if err != nil || !c3 || j3.ID != j1.ID {
		t.Fatalf("retry through a member: job %d created %v err %v, want job %d created", j3.ID, c3, err, j1.ID)
	}
	if err := member.ReadBarrier(ctx); err != nil {
		t.Fatalf("member's read barrier: %v", err)
	}
	if n := len(member.Jobs(JobQuery{})); n != 1 {
		t.Fatalf("member: %d jobs after the barrier, want 1", n)
	}
	// Another request (a fresh id) with the same key is a duplicate.
	keyed := JobSpec{Key: "once", Type: "t"}
	if _, c, err := nodes[0].Enqueue(ctx, keyed); err != nil || !c {
		t.Fatal(err, c)
	}
	if _, c, err := nodes[1].Enqueue(ctx, keyed); err != nil || c {
		t.Fatalf("a second request with the key: created %v err %v", c, err)
	}
}

// BenchmarkReadBarrier measures Node.ReadBarrier on a follower of three
// MemNetwork voters (in-process networks, in-memory logs) beside a keyed
// Enqueue through the same follower (a commit): the barrier costs a round
// trip to the leader and a quorum confirm round, no log entry.
func BenchmarkReadBarrier(b *testing.B) {
	ctx := context.Background()
	net := NewMemNetwork()
	var nodes []*Node
	for _, id := range []string{"a", "b", "c"} {
		cfg := memConfig(net, id)
		cfg.Profile = ProfileFast
		cfg.Logger = slog.New(slog.DiscardHandler)
		n, err := Start(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close(context.Background())
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if err := n.WaitSettled(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var follower *Node
	deadline := time.Now().Add(30 * time.Second)
	for follower == nil || !follower.be.versionActive(ledger.VersionJobsAPI) {
		if time.Now().After(deadline) {
			b.Fatal("no follower at cluster version 5")
		}
		for _, n := range nodes {
			if l := n.Status().ControlLeader; l != "" && l != n.ID() {
				follower = n
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with the deadline above
	}
	b.Run("barrier", func(b *testing.B) {
		for b.Loop() {
			if err := follower.ReadBarrier(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("enqueue", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, _, err := follower.Enqueue(ctx, JobSpec{Key: fmt.Sprintf("bench-%d", i), Type: "t"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestJobsAPIGatedByClusterVersion: in a cluster whose binaries speak
// version 4 at most, no enqueue carries the cap (encoding version 7), the
// cap is still enforced on the replica, and ReadBarrier answers
// ErrUnsupported; at version 5 every capped enqueue carries it.
func TestJobsAPIGatedByClusterVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	for _, v := range []uint32{ledger.VersionJobsAPI - 1, ledger.VersionJobsAPI} {
		t.Run(fmt.Sprintf("version%d", v), func(t *testing.T) {
			ctx := testCtx(t)
			net := NewMemNetwork()
			var mu sync.Mutex
			capped, uncapped := 0, 0
			net.OnApply = func(_ string, _ uint64, _ uint64, c ledger.Command, _ ledger.Result) {
				if e, ok := ledger.Unwrap(c).(ledger.JobEnqueue); ok {
					mu.Lock()
					if e.MaxPending != 0 {
						capped++
					} else {
						uncapped++
					}
					mu.Unlock()
				}
			}
			mod := func(c *Config) { c.Profile, c.MaxPendingJobs, c.speakMax = ProfileFast, 2, v }
			nodes := []*Node{startMem(t, net, "a", mod), startMem(t, net, "b", mod)}
			for _, n := range nodes {
				if err := n.WaitSettled(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !waitTrue(ctx, func() bool {
				st := nodes[1].be.(*netBackend).fsm.State()
				return st.Cluster().Name != "" && st.ActiveVersion() == v
			}) {
				t.Fatalf("cluster never ran version %d", v)
			}
			for i := range 2 {
				if _, created, err := nodes[i].Enqueue(ctx, JobSpec{Key: fmt.Sprint("g", i), ShardKey: "t", Type: "t"}); err != nil || !created {
					t.Fatal(created, err)
				}
			}
			if err := nodes[1].ReadBarrier(ctx); (err == nil) != (v >= ledger.VersionJobsAPI) || (err != nil && !errors.Is(err, ErrUnsupported)) {
				t.Fatalf("ReadBarrier at version %d: %v", v, err)
			}
			if !waitTrue(ctx, func() bool { return len(nodes[1].Jobs(JobQuery{})) == 2 }) {
				t.Fatal("the second node never saw both jobs")
			}
			if _, _, err := nodes[1].Enqueue(ctx, JobSpec{Key: "g2", ShardKey: "t", Type: "t"}); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("third pending job with cap 2: %v", err)
			}
			if _, created, err := nodes[1].Enqueue(ctx, JobSpec{Key: "g0", ShardKey: "t", Type: "t"}); err != nil || created {
				t.Fatalf("duplicate on the full shard: %v %v", created, err)
			}
			mu.Lock()
			defer mu.Unlock()
			t.Logf("version %d: applied enqueues with the cap %d, without %d", v, capped, uncapped)
			if v < ledger.VersionJobsAPI && capped > 0 {
				t.Fatalf("version %d: %d applied enqueues carried the cap (encoding version 7)", v, capped)
			}
			if v >= ledger.VersionJobsAPI && (capped == 0 || uncapped > 0) {
				t.Fatalf("version %d: %d applied enqueues carried the cap, %d did not", v, capped, uncapped)
			}
		})
	}
}
