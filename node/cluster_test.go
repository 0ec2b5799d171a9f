package node

// Multi-node tests over real loopback networking: real gossip, real Raft
// with bolt storage in temp dirs, the real ledger, planner and tracker.
// Deadlines are generous (a loaded 2-core machine); the happy path takes a
// few seconds of the fast profile's 800 ms leases.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const clusterTimeout = 30 * time.Second

// freePorts reserves n loopback ports (closed again before use: a small
// race with other processes, acceptable in tests).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// lockedLog collects the nodes' logs for a failing test.
type lockedLog struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

// tail returns the last n lines.
func (l *lockedLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(l.b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// testCluster is n nodes on loopback.
type testCluster struct {
	t     *testing.T
	cfgs  []Config
	nodes []*Node
}

func newCluster(t *testing.T, n int, mod func(i int, c *Config)) *testCluster {
	t.Helper()
	if old := tuneControl; true {
		tuneControl = func(c *controlTuning) { old(c); c.lanRaft = true }
		t.Cleanup(func() { tuneControl = old })
	}
	ports := freePorts(t, 2*n)
	tc := &testCluster{t: t, nodes: make([]*Node, n)}
	logs := &lockedLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs (last 150 lines):\n%s", logs.tail(150))
		}
	})
	var seeds []string
	for i := range n {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	for i := range n {
		cfg := ConfigFromEnv(func(string) string { return "" })
		cfg.NodeID = fmt.Sprintf("n%d", i+1)
		cfg.Profile = ProfileFast
		cfg.Partitions = 16
		cfg.BootstrapExpect = n
		cfg.DataDir = t.TempDir()
		cfg.GossipAddr = seeds[i]
		cfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		cfg.Seeds = slices.Clone(seeds)
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", cfg.NodeID)
		if mod != nil {
			mod(i, &cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc.nodes[i], errs[i] = tc.start(i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			tc.closeAll()
			t.Fatalf("start n%d: %v", i+1, err)
		}
	}
	t.Cleanup(tc.closeAll)
	t.Cleanup(func() { // runs before closeAll: the nodes' views at the failure
		if !t.Failed() {
			return
		}
		for _, n := range tc.nodes {
			if n == nil {
				continue
			}
			var st strings.Builder
			for _, sh := range n.Shards() {
				fmt.Fprintf(&st, "\n  shard %d epoch %d owner %s %s valid=%v acting=%v target=%q", sh.Shard, sh.Epoch, sh.Owner, sh.State, sh.Valid, sh.Acting, sh.Target)
			}
			t.Logf("%s's view at the failure:%s", n.ID(), st.String())
		}
	})
	// Start from the converged placement. At first every shard goes to
	// the first eligible node; the ring rebalances once the others have
	// been eligible for StableFor. A test that reads an owner before that
	// (WaitLeader, Owner) would race the rebalancing.
	ctx := tc.ctx()
	if !waitTrue(ctx, func() bool {
		for _, nd := range tc.nodes {
			if len(nd.Owned()) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the placement never reached every node")
	}
	for _, nd := range tc.nodes {
		if err := nd.WaitSettled(ctx); err != nil {
			t.Fatalf("%s: not settled: %v", nd.ID(), err)
		}
	}
	return tc
}

func (tc *testCluster) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	tc.t.Cleanup(cancel)
	return ctx
}

func (tc *testCluster) start(i int) (*Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	return Start(ctx, tc.cfgs[i])
}

func (tc *testCluster) closeAll() {
	for _, n := range tc.nodes {
		if n != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.Close(ctx)
			cancel()
		}
	}
}

func (tc *testCluster) byID(id string) *Node {
	for _, n := range tc.nodes {
		if n != nil && n.ID() == id {
			return n
		}
	}
	tc.t.Fatalf("no node %q", id)
	return nil
}

func (tc *testCluster) others(id string) []*Node {
	var out []*Node
	for _, n := range tc.nodes {
		if n.ID() != id {
			out = append(out, n)
		}
	}
	return out
}

// Leadership events arrive in order on every node: each LeaderChanged has
// a higher epoch than the last, and a node's BecameLeader follows the
// LeaderChanged naming it.
func TestClusterLeadershipEventsInOrder(t *testing.T) {
	// n3 is in another group: groups share one cluster.
	tc := newCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			c.Group = "other"
		}
	})
	if ms := tc.nodes[0].Members(); len(ms) != 3 || ms[2].Group != "other" || ms[0].Group != DefaultGroup {
		t.Fatalf("members %+v", ms)
	}
	if idx, count, err := tc.nodes[1].GroupPosition(); idx != 1 || count != 2 || err != nil {
		t.Fatalf("GroupPosition of n2 = %d, %d, %v", idx, count, err)
	}
	ctx := tc.ctx()
	leaderID, err := tc.nodes[0].Election("singleton").WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := tc.byID(leaderID)
	subs := map[string]*Subscription[ElectionEvent]{}
	for _, n := range tc.others(leaderID) {
		subs[n.ID()] = n.Election("singleton").Events(64)
	}
	// The leader leaves; one of the others takes over.
	if err := leader.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var newLeader string
	for id, sub := range subs {
		var lastEpoch uint64
		lastLeader := ""
		for {
			ev := recvCtx(t, ctx, sub)
			if ev.Kind == LeaderChanged {
				if ev.Token.Epoch < lastEpoch {
					t.Fatalf("%s: epoch went back: %v after %d", id, ev, lastEpoch)
				}
				lastEpoch, lastLeader = ev.Token.Epoch, ev.Leader
			}
			if ev.Kind == BecameLeader && lastLeader != id {
				t.Fatalf("%s: BecameLeader before a LeaderChanged naming it (last leader %q)", id, lastLeader)
			}
			if lastLeader != "" && lastLeader != leaderID {
				if newLeader != "" && newLeader != lastLeader {
					t.Fatalf("nodes disagree on the new leader: %q vs %q", newLeader, lastLeader)
				}
				newLeader = lastLeader
				break
			}
		}
	}
	if got := tc.byID(newLeader).Election("singleton"); !waitTrue(ctx, got.IsLeader) {
		t.Fatalf("%s never acted as leader", newLeader)
	}
}

func recvCtx[T any](t *testing.T, ctx context.Context, s *Subscription[T]) T {
	t.Helper()
	select {
	case v, ok := <-s.C():
		if !ok {
			t.Fatal("subscription closed")
		}
		return v
	case <-ctx.Done():
		t.Fatal("no event before the deadline")
	}
	panic("unreachable")
}

func waitTrue(ctx context.Context, f func() bool) bool {
	for !f() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// A node cut off from the control group cancels its workers before its
// lease ends, and the successor's worker starts only after that.
func TestClusterWorkerCancelledBeforeLeaseEnds(t *testing.T) {
	tc := newCluster(t, 3, nil)
	ctx := tc.ctx()
	e := tc.nodes[0].Election("cron")
	leaderID, err := e.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type span struct {
		node       string
		start, end time.Time
		leaseEnd   time.Time
	}
	var mu sync.Mutex
	var spans []span
	started := map[string]bool{} // nodes whose worker has started
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, n := range tc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Election("cron").Run(workCtx, func(ctx context.Context, tok Token) error {
				s := span{node: n.ID(), start: time.Now()}
				mu.Lock()
				started[n.ID()] = true
				mu.Unlock()
				<-ctx.Done()
				s.end = time.Now()
				s.leaseEnd = n.be.lease().leaseEnd
				mu.Lock()
				spans = append(spans, s)
				mu.Unlock()
				return nil
			})
		}()
	}
	leader := tc.byID(leaderID)
	if !waitTrue(ctx, leader.Election("cron").IsLeader) {
		t.Fatal("leader never acted")
	}
	// Partition the leader from the control group: its renewals fail.
	leader.be.(*netBackend).dropHeartbeats.Store(true)
	// Wait for the successor's worker itself, not just IsLeader: the
	// worker starts a moment after the node begins to act.
	var successor string
	if !waitTrue(ctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range tc.others(leaderID) {
			if started[n.ID()] {
				successor = n.ID()
				return true
			}
		}
		return false
	}) {
		t.Fatal("no successor")
	}
	stop()
	wg.Wait()
	var old, next *span
	for i := range spans {
		switch spans[i].node {
		case leaderID:
			if old == nil {
				old = &spans[i]
			}
		case successor:
			next = &spans[i]
		}
	}
	if old == nil || next == nil {
		t.Fatalf("spans %+v", spans)
	}
	if !old.end.Before(old.leaseEnd) {
		t.Fatalf("worker cancelled at %v, not before its lease ended at %v", old.end, old.leaseEnd)
	}
	if !next.start.After(old.end) {
		t.Fatalf("successor started at %v before the old worker stopped at %v", next.start, old.end)
	}
	t.Logf("partition: old worker stopped %v before its lease end; successor started %v after it",
		old.leaseEnd.Sub(old.end).Round(time.Millisecond), next.start.Sub(old.end).Round(time.Millisecond))
}

// A job is completed once even when its owner is cut off mid-attempt and
// the next owner restarts it; the old attempt's completion is rejected.
// The next owner recovers the attempt at once: the job timeout is far
// longer than the test.
func TestClusterJobNeverCompletedTwiceAcrossFailover(t *testing.T) {
	tc := newCluster(t, 3, func(_ int, c *Config) { c.JobTimeout = time.Hour })
	ctx := tc.ctx()
	job, _, err := tc.nodes[0].Enqueue(ctx, JobSpec{Key: "charge/order-1", ShardKey: "customer-1"})
	if err != nil {
		t.Fatal(err)
	}
	ownerID := tc.nodes[0].Owner(job.Shard)
	owner := tc.byID(ownerID)
	tok, err := owner.Token(job.Shard)
	if err != nil {
		t.Fatal(err)
	}
	first, err := owner.StartJob(ctx, tok, job)
	if err != nil {
		t.Fatal(err)
	}
	owner.be.(*netBackend).dropHeartbeats.Store(true)
	var next *Node
	if !waitTrue(ctx, func() bool {
		for _, n := range tc.others(ownerID) {
			if n.IsOwner(job.Shard) {
				next = n
				return true
			}
		}
		return false
	}) {
		t.Fatal("no new owner")
	}
	var runnable []Job
	if !waitTrue(ctx, func() bool { runnable = next.RunnableJobs(job.Shard); return len(runnable) == 1 }) {
		t.Fatal("the cut-off owner's attempt never became runnable")
	}
	tok2, err := next.Token(job.Shard)
	if err != nil {
		t.Fatal(err)
	}
	second, err := next.StartJob(ctx, tok2, runnable[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.CompleteJob(ctx, second, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	// The cut-off owner's late completion is fenced out.
	owner.be.(*netBackend).dropHeartbeats.Store(false)
	if _, err := owner.CompleteJob(ctx, first, []byte("late")); !errors.Is(err, ErrStaleToken) && !errors.Is(err, ErrJobState) {
		t.Fatalf("late completion = %v, want a fencing rejection", err)
	}
	final, err := next.Job(job.ID)
	if err != nil || final.State != JobCompleted || final.Attempt != 2 || string(final.Result) != "ok" {
		t.Fatalf("final job %+v %v", final, err)
	}
}

// sumSM is an application state machine: the sum of uint64 payloads per
// shard, with snapshots.
type sumSM struct {
	mu   sync.Mutex
	sums map[uint32]uint64
	n    int
}

func newSumSM() *sumSM { return &sumSM{sums: map[uint32]uint64{}} }

func (s *sumSM) Apply(shard uint32, _ uint64, _ uint64, p []byte) ([]byte, error) {
	if len(p) != 8 {
		return nil, errors.New("want 8 bytes")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sums[shard] += binary.BigEndian.Uint64(p)
	s.n++
	return nil, nil
}

func (s *sumSM) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for _, sh := range sortedShards(s.sums) {
		b = binary.BigEndian.AppendUint32(b, sh)
		b = binary.BigEndian.AppendUint64(b, s.sums[sh])
	}
	return b, nil
}

func (s *sumSM) Restore(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sums = map[uint32]uint64{}
	for len(b) >= 12 {
		s.sums[binary.BigEndian.Uint32(b)] = binary.BigEndian.Uint64(b[4:])
		b = b[12:]
	}
	return nil
}

func (s *sumSM) dump() []byte {
	b, _ := s.Snapshot()
	return b
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// A command proposed with a stale token is rejected and applied nowhere.
func TestClusterStaleTokenRejected(t *testing.T) {
	sms := []*sumSM{newSumSM(), newSumSM(), newSumSM()}
	tc := newCluster(t, 3, func(i int, c *Config) { c.StateMachines = map[string]StateMachine{"sum": sms[i]} })
	ctx := tc.ctx()
	shard := tc.nodes[0].ShardFor("tenant-7")
	ownerID := tc.nodes[0].Owner(shard)
	owner := tc.byID(ownerID)
	tok, err := owner.Token(shard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := owner.Propose(ctx, tok, "sum", u64(5))
	if err != nil && !errors.Is(err, ErrNoQuorum) {
		t.Fatal(err)
	}
	// The owner drains: the shard moves to another node at a new epoch.
	if err := owner.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Propose(ctx, tok, "sum", u64(1000)); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("stale propose = %v, want ErrStaleToken", err)
	}
	var newOwner *Node
	if !waitTrue(ctx, func() bool {
		for _, n := range tc.others(ownerID) {
			if n.IsOwner(shard) {
				newOwner = n
				return true
			}
		}
		return false
	}) {
		t.Fatal("no new owner")
	}
	tok2, _ := newOwner.Token(shard)
	if !tok2.Newer(tok) {
		t.Fatalf("new token %s not newer than %s", tok2, tok)
	}
	var b Applied
	for {
		b, err = newOwner.Propose(ctx, tok2, "sum", u64(7))
		if !errors.Is(err, ErrNoQuorum) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for i, n := range tc.nodes {
		if !waitTrue(ctx, func() bool { return n.AppliedIndex() >= b.Index }) {
			t.Fatalf("%s did not apply index %d", n.ID(), b.Index)
		}
		sms[i].mu.Lock()
		got := sms[i].sums[shard]
		sms[i].mu.Unlock()
		if i == 0 {
			want = got
		}
		// 5 (unless its outcome was unknown and it was lost) + 7; the
		// stale 1000 must never apply.
		if got != want || (got != 12 && got != 7) {
			t.Fatalf("%s: sum %d (node 1: %d), want 12 (5 + 7; the stale 1000 must not apply) [first at %d]", n.ID(), got, want, a.Index)
		}
	}
}

// A restarted node rebuilds its application state from the last snapshot
// plus the log after it.
func TestClusterRestartRebuildsFromSnapshotAndLog(t *testing.T) {
	defer func(old func(*controlTuning)) { tuneControl = old }(tuneControl)
	tuneControl = func(c *controlTuning) {
		c.snapshotThreshold, c.snapshotInterval, c.lanRaft = 32, 50*time.Millisecond, true
	}
	sms := []*sumSM{newSumSM(), newSumSM(), newSumSM()}
	tc := newCluster(t, 3, func(i int, c *Config) { c.StateMachines = map[string]StateMachine{"sum": sms[i]} })
	ctx := tc.ctx()
	propose := func(n int) uint64 {
		var last uint64
		for i := range n {
			shard := uint32(i % 16)
			var owner *Node
			var tok Token
			if !waitTrue(ctx, func() bool {
				for _, n := range tc.nodes {
					if t, err := n.Token(shard); err == nil {
						owner, tok = n, t
						return true
					}
				}
				return false
			}) {
				t.Fatalf("shard %d has no acting owner", shard)
			}
			a, err := owner.Propose(ctx, tok, "sum", u64(uint64(i)))
			if errors.Is(err, ErrNoQuorum) {
				continue // outcome unknown (a Raft election): every replica agrees either way
			}
			if errors.Is(err, ErrNotOwner) {
				// The lease lapsed between Token and Propose (a leader
				// change on a loaded machine, CI): the fence refused the
				// stale token, as it must. Nothing applied; go on.
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, a.Index)
		}
		return last
	}
	propose(100) // well past the snapshot threshold
	victim := 2
	if !waitTrue(ctx, func() bool { return tc.nodes[victim].be.(*netBackend).snapshots() > 0 }) {
		t.Fatal("no snapshot taken")
	}
	tc.nodes[victim].kill()
	last := propose(20) // the log tail the restarted node must replay
	sms[victim] = newSumSM()
	tc.cfgs[victim].StateMachines = map[string]StateMachine{"sum": sms[victim]}
	n, err := tc.start(victim)
	if err != nil {
		t.Fatal(err)
	}
	tc.nodes[victim] = n
	if !waitTrue(ctx, func() bool { return n.AppliedIndex() >= last }) {
		t.Fatalf("restarted node stuck at %d < %d", n.AppliedIndex(), last)
	}
	if want, got := sms[0].dump(), sms[victim].dump(); !bytes.Equal(want, got) {
		t.Fatalf("restarted state differs:\n got %x\nwant %x", got, want)
	}
	if sms[victim].n >= 120 {
		t.Fatalf("restarted node applied %d commands one by one: the snapshot was not used", sms[victim].n)
	}
}

// A node whose health drops below the minimum hands its shards over
// (graceful step-down) and gets them back when it recovers.
func TestClusterHealthStepDown(t *testing.T) {
	tc := newCluster(t, 3, nil)
	ctx := tc.ctx()
	sick := tc.nodes[0]
	if err := sick.SetHealth(0.1, map[string]string{"disk": "full"}); err != nil {
		t.Fatal(err)
	}
	if !waitTrue(ctx, func() bool {
		if sick.ownsCommitted() {
			return false
		}
		owned := 0
		for _, n := range tc.others(sick.ID()) {
			owned += len(n.Owned())
		}
		return owned == sick.Partitions()
	}) {
		t.Fatalf("shards did not move off the unhealthy node: it owns %v", sick.Owned())
	}
	if r := sick.Health(); r.Status != Degraded {
		t.Fatalf("health %v %v", r.Status, r.Reasons)
	}
	var seen bool
	for _, c := range tc.nodes[1].Candidates() {
		if c.ID == sick.ID() {
			seen = true
			if c.Eligible || c.Healthy || c.Metadata["disk"] != "full" {
				t.Fatalf("candidate %+v", c)
			}
		}
	}
	if !seen {
		t.Fatal("unhealthy node missing from Candidates")
	}
	if err := sick.SetHealth(1, nil); err != nil {
		t.Fatal(err)
	}
	if !waitTrue(ctx, func() bool { return len(sick.Owned()) > 0 }) {
		t.Fatal("recovered node never got shards back")
	}
}
