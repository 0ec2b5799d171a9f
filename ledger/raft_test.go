package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func fastRaftConfig(id string) *raft.Config {
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(id)
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	cfg.BatchApplyCh = true
	return cfg
}

// safetyRecorder checks S1 and "a job completes at most once" on one
// replica, from its OnApply hook.
type safetyRecorder struct {
	mu        sync.Mutex
	owners    map[[2]uint64]string // (shard, epoch) -> owner granted
	completed map[uint64]int
	bad       []string
}

func newSafetyRecorder(f *FSM) *safetyRecorder {
	s := &safetyRecorder{owners: map[[2]uint64]string{}, completed: map[uint64]int{}}
	f.OnApply(func(_ uint64, c Command, r Result) {
		if r.Err != nil {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		switch c.(type) {
		case Grant, Transfer:
			k := [2]uint64{uint64(r.Shard.Shard), r.Shard.Epoch}
			if prev, ok := s.owners[k]; ok {
				s.bad = append(s.bad, fmt.Sprintf("shard %d epoch %d granted to %q and %q", k[0], k[1], prev, r.Shard.Owner))
			}
			s.owners[k] = r.Shard.Owner
		case JobComplete:
			s.completed[r.Job.ID]++
			if s.completed[r.Job.ID] > 1 {
				s.bad = append(s.bad, fmt.Sprintf("job %d completed %d times", r.Job.ID, s.completed[r.Job.ID]))
			}
		}
	})
	return s
}

type testCluster struct {
	t      *testing.T
	rafts  []*raft.Raft
	fsms   []*FSM
	trans  []*raft.InmemTransport
	addrs  []raft.ServerAddress
	recs   []*safetyRecorder
	cutOff atomic.Int32 // index+1 of the isolated node, 0 = none
}

func newTestCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t}
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		c.addrs = append(c.addrs, addr)
		c.trans = append(c.trans, tr)
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprint("r", i)), Address: addr})
	}
	c.connectAll()
	for i := range n {
		f, _ := newTestFSM(t, DefaultConfig())
		c.fsms = append(c.fsms, f)
		c.recs = append(c.recs, newSafetyRecorder(f))
		r, err := raft.NewRaft(fastRaftConfig(string(servers[i].ID)), f, raft.NewInmemStore(), raft.NewInmemStore(),
			raft.NewInmemSnapshotStore(), c.trans[i])
		if err != nil {
			t.Fatal(err)
		}
		c.rafts = append(c.rafts, r)
	}
	t.Cleanup(func() {
		for _, r := range c.rafts {
			_ = r.Shutdown().Error()
		}
	})
	if err := c.rafts[0].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *testCluster) connectAll() {
	for i, a := range c.trans {
		for j, b := range c.trans {
			if i != j {
				a.Connect(c.addrs[j], b)
			}
		}
	}
}

func (c *testCluster) isolate(i int) {
	c.trans[i].DisconnectAll()
	for j, tr := range c.trans {
		if j != i {
			tr.Disconnect(c.addrs[i])
		}
	}
	c.cutOff.Store(int32(i + 1))
}

func (c *testCluster) heal() {
	c.connectAll()
	c.cutOff.Store(0)
}

// leader waits for a leader among the connected nodes.
func (c *testCluster) leader(deadline time.Time) (int, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for i, r := range c.rafts {
			if r.State() == raft.Leader && int(c.cutOff.Load()) != i+1 {
				return i, nil
			}
		}
		if time.Now().After(deadline) {
			return -1, errors.New("no leader")
		}
		<-tick.C
	}
}

func retryable(err error) bool {
	return errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader) ||
		errors.Is(err, raft.ErrEnqueueTimeout) || errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		errors.Is(err, raft.ErrAbortedByRestore)
}

// apply proposes c until some leader answers, retrying the identical bytes
// after every unknown-outcome error. It returns the result and how many
// attempts failed with an unknown outcome.
func (c *testCluster) apply(c0 Command) (Result, int, error) {
	data := MustEncode(c0)
	deadline := time.Now().Add(30 * time.Second)
	retries := 0
	for {
		i, err := c.leader(deadline)
		if err != nil {
			return Result{}, retries, err
		}
		f := c.rafts[i].Apply(data, time.Second)
		if err := f.Error(); err != nil {
			if !retryable(err) || time.Now().After(deadline) {
				return Result{}, retries, err
			}
			retries++
			continue
		}
		return f.Response().(Result), retries, nil
	}
}

// TestRaftLeaderCutOff: three voters; proposers move shards between nodes
// and run jobs while the leader is cut off mid-stream and later healed.
// Every proposal that fails with an unknown outcome is retried verbatim.
// No shard is ever granted twice at one epoch, no job completes twice, and
// all replicas end identical.
func TestRaftLeaderCutOff(t *testing.T) {
	c := newTestCluster(t, 3)
	for _, n := range []string{"a", "b", "c"} {
		if r, _, err := c.apply(Heartbeat{Node: n, Incarnation: 1}); err != nil || r.Err != nil {
			t.Fatalf("heartbeat %s: %v %v", n, err, r.Err)
		}
	}
	nodes := []string{"a", "b", "c"}
	const shards, rounds = 4, 25
	var ops, retries atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, shards)
	for s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				// Read the (possibly stale) record from any replica: a stale
				// read only makes the CAS fail.
				rec, _ := c.fsms[(s+round)%3].State().Shard(uint32(s))
				next := nodes[(s+round)%3]
				var cmd Command
				if rec.State == ShardOwned && rec.Owner != next {
					cmd = Transfer{Shard: uint32(s), Epoch: rec.Epoch, From: rec.Owner, To: next, ToIncarnation: 1, ToLiveness: 1, Reason: "move"}
				} else {
					cmd = Grant{Shard: uint32(s), ExpectedEpoch: rec.Epoch, Owner: next, OwnerIncarnation: 1, OwnerLiveness: 1}
				}
				r, n, err := c.apply(cmd)
				retries.Add(int64(n))
				if err != nil {
					errc <- err
					return
				}
				ops.Add(1)
				rec = r.Shard
				if r.Err != nil || rec.State != ShardOwned {
					continue
				}
				// Run one job as the owner.
				r, n, err = c.apply(JobEnqueue{Shard: uint32(s), Key: fmt.Sprintf("s%d-r%d", s, round)})
				retries.Add(int64(n))
				if err != nil || r.Err != nil {
					errc <- fmt.Errorf("enqueue: %v %v", err, r.Err)
					return
				}
				job := r.Job
				r, n, err = c.apply(JobStart{Shard: uint32(s), Epoch: rec.Epoch, Owner: rec.Owner, Job: job.ID, Attempt: job.Attempt})
				retries.Add(int64(n))
				if err != nil {
					errc <- err
					return
				}
				if r.Err != nil {
					continue // e.g. a retried start whose first try committed
				}
				_, n, err = c.apply(JobComplete{Shard: uint32(s), Epoch: rec.Epoch, Job: job.ID, Attempt: r.Job.Attempt})
				retries.Add(int64(n))
				if err != nil {
					errc <- err
					return
				}
				ops.Add(3)
			}
		}()
	}
	// Cut the leader off mid-stream, then heal once a new leader has made
	// progress.
	deadline := time.Now().Add(30 * time.Second)
	waitOps := func(n int64) {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for ops.Load() < n && time.Now().Before(deadline) {
			<-tick.C
		}
	}
	waitOps(30)
	old, err := c.leader(deadline)
	if err != nil {
		t.Fatal(err)
	}
	c.isolate(old)
	// One proposal is sure to be in flight on the isolated leader: it must
	// fail with an unknown outcome, and its retry must commit exactly once.
	probe := Grant{Shard: 100, ExpectedEpoch: 0, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, Reason: "probe"}
	if err := c.rafts[old].Apply(MustEncode(probe), time.Second).Error(); !retryable(err) {
		t.Fatalf("proposal on the isolated leader: %v, want an unknown-outcome error", err)
	}
	if r, n, err := c.apply(probe); err != nil || r.Err != nil || r.Shard.Epoch != 1 {
		t.Fatalf("retried probe: %+v %v", r, err)
	} else {
		retries.Add(int64(n) + 1)
	}
	at := ops.Load()
	waitOps(at + 60)
	newLeader, _ := c.leader(deadline)
	t.Logf("isolated r%d at ops=%d; new leader r%d at ops=%d", old, at, newLeader, ops.Load())
	c.heal()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// All replicas converge.
	last, _, err := c.apply(Heartbeat{Node: "a", Incarnation: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, f := range c.fsms {
		if err := f.WaitApplied(ctx, last.Index); err != nil {
			t.Fatalf("replica %d did not apply %d: %v", i, last.Index, err)
		}
	}
	want := dumpState(c.fsms[0].State())
	for i, f := range c.fsms {
		if got := dumpState(f.State()); got != want {
			t.Fatalf("replica %d differs:\n%s\nvs\n%s", i, got, want)
		}
		rec := c.recs[i]
		rec.mu.Lock()
		if len(rec.bad) > 0 {
			t.Fatalf("replica %d: %v", i, rec.bad)
		}
		rec.mu.Unlock()
	}
	t.Logf("ops=%d unknown-outcome retries=%d isolated=r%d", ops.Load(), retries.Load(), old)
}
