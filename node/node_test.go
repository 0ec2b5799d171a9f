package node

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// testTimeout bounds every wait in these tests; the happy path takes
// milliseconds.
const testTimeout = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func memConfig(net *MemNetwork, id string) Config {
	cfg := ConfigFromEnv(func(string) string { return "" })
	cfg.NodeID, cfg.Network, cfg.Partitions = id, net, 8
	return cfg
}

func startMem(t *testing.T, net *MemNetwork, id string, mod ...func(*Config)) *Node {
	t.Helper()
	cfg := memConfig(net, id)
	for _, f := range mod {
		f(&cfg)
	}
	n, err := Start(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

// recv waits for the next value of a subscription.
func recv[T any](t *testing.T, s *Subscription[T]) T {
	t.Helper()
	select {
	case v, ok := <-s.C():
		if !ok {
			t.Fatal("subscription closed")
		}
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no event within the deadline (%T)", s)
	}
	panic("unreachable")
}

func TestConfigValidateNamesBadValues(t *testing.T) {
	base := ConfigFromEnv(func(k string) string {
		return map[string]string{EnvNodeID: "n1", EnvGroup: "g"}[k]
	})
	base.DataDir = "/tmp/x"
	base.Seeds = []string{"10.0.0.1:7946"}
	base.RaftAdvertise = "10.0.0.2:7947"
	base.TLSCAFile, base.TLSCertFile, base.TLSKeyFile = "/tls/ca.pem", "/tls/n1.pem", "/tls/n1-key.pem"
	base.EncryptionKey = make([]byte, 32)
	if err := base.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	if base.NodeID != "n1" || base.Group != "g" {
		t.Fatalf("identity from env: got %q/%q", base.NodeID, base.Group)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"empty id", func(c *Config) { c.NodeID = "" }, `NodeID ""`},
		{"slash id", func(c *Config) { c.NodeID = "a/b" }, `NodeID "a/b"`},
		{"profile", func(c *Config) { c.Profile = "warp" }, `Profile "warp"`},
		{"partitions", func(c *Config) { c.Partitions = -1 }, "Partitions -1"},
		{"min health", func(c *Config) { c.MinHealth = 2 }, "MinHealth = 2"},
		{"load threshold", func(c *Config) { c.LoadThreshold = 101 }, "Load.Threshold = 101"},
		{"load swaps", func(c *Config) { c.LoadSwapsPerMinute = -1 }, "Load.SwapsPerMinute = -1"},
		{"load settle", func(c *Config) { c.LoadSettle = -time.Second }, "Load.Settle = -1s"},
		{"expect", func(c *Config) { c.BootstrapExpect = 9 }, "BootstrapExpect 9"},
		{"raft advertise", func(c *Config) { c.RaftAdvertise = "" }, "RaftAdvertise empty with wildcard RaftAddr"},
		{"key", func(c *Config) { c.EncryptionKey = []byte("short") }, "EncryptionKey of 5 bytes"},
		{"data dir", func(c *Config) { c.DataDir = "" }, "DataDir empty"},
		{"gossip addr", func(c *Config) { c.GossipAddr = "nope" }, `GossipAddr "nope"`},
		{"seed addr", func(c *Config) { c.Seeds = []string{"x"} }, `Seeds[0] "x"`},
		{"nil sm", func(c *Config) { c.StateMachines = map[string]StateMachine{"t": nil} }, `StateMachines["t"] is nil`},
		{"job timeout", func(c *Config) { c.JobTimeout = -time.Second }, "JobTimeout -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %q, want it to name %q", err, tt.want)
			}
		})
	}
	// Two problems are both named.
	c := base
	c.NodeID, c.Partitions = "", 0
	c.Profile = "x"
	err := c.Validate()
	if !strings.Contains(err.Error(), "NodeID") || !strings.Contains(err.Error(), "Profile") {
		t.Fatalf("Validate() = %q, want both problems", err)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	_, err := Start(testCtx(t), Config{})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Start(Config{}) = %v, want ErrInvalidConfig", err)
	}
}

func TestShardForIsStable(t *testing.T) {
	// Values pinned: changing the key hash moves every shard of every
	// existing cluster.
	if got := ShardFor(271, "tenant-42"); got != ShardFor(271, "tenant-42") || got >= 271 {
		t.Fatalf("ShardFor = %d", got)
	}
	if ShardFor(0, "x") != 0 {
		t.Fatal("ShardFor(0, x) != 0")
	}
}

// On a handover, the old owner sees ShardLost before the OwnerChanged that
// names the new owner, and the new owner sees OwnerChanged before
// ShardAcquired; epochs increase.
func TestEventsOrderOnHandover(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	subA := a.Subscribe(256)
	defer subA.Close()
	// Drain the initial state.
	for range 2 * a.Partitions() {
		recv(t, subA)
	}
	b := startMem(t, net, "b")
	subB := b.Subscribe(256)
	defer subB.Close()
	// The leader moves shards to b once it has been stable for a while;
	// all of the round's moves are then in flight, and WaitSettled waits
	// for them.
	if err := a.waitFor(ctx, func() bool { return len(b.Owned()) > 0 }); err != nil {
		t.Fatalf("no shard moved to b: %v", err)
	}
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	owned := b.Owned()
	moved := len(owned)
	if moved == 0 {
		t.Fatal("no shard moved to b")
	}
	perShard := map[uint32][]Event{}
	for complete := 0; complete < moved; {
		ev := recv(t, subA)
		perShard[ev.Shard] = append(perShard[ev.Shard], ev)
		if len(perShard[ev.Shard]) == 2 {
			complete++
		}
	}
	for _, sh := range owned {
		evs := perShard[sh.Shard]
		if len(evs) != 2 || evs[0].Kind != ShardLost || evs[1].Kind != OwnerChanged || evs[1].Owner != "b" || evs[1].Epoch <= evs[0].Epoch {
			t.Fatalf("shard %d events on a: %v", sh.Shard, evs)
		}
	}
	// On b: owner-changed before acquired, per shard.
	seen := map[uint32]EventKind{}
	for len(seen) < moved || hasNonAcquired(seen) {
		ev := recv(t, subB)
		if ev.Owner != "b" {
			continue
		}
		if ev.Kind == ShardAcquired && seen[ev.Shard] != OwnerChanged {
			t.Fatalf("shard %d acquired before its owner-changed", ev.Shard)
		}
		seen[ev.Shard] = ev.Kind
	}
	if subA.Dropped() != 0 || subB.Dropped() != 0 {
		t.Fatalf("dropped events: %d %d", subA.Dropped(), subB.Dropped())
	}
}

func hasNonAcquired(m map[uint32]EventKind) bool {
	for _, k := range m {
		if k != ShardAcquired {
			return true
		}
	}
	return false
}

// A worker's context is cancelled when its shard is revoked, and the shard
// is handed over only after the worker returned.
func TestWorkerDrainsBeforeHandover(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	b := startMem(t, net, "b")
	if err := b.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	// a is the node that leads "cron"; draining it transfers the shard.
	leader, err := a.Election("cron").WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == "b" {
		a = b
	}
	e := a.Election("cron")
	type obs struct {
		cause        error
		stateOnExit  ShardState
		ownerOnExit  string
		tokenOnStart Token
	}
	got := make(chan obs, 1)
	started := make(chan struct{})
	go func() {
		_ = a.RunLeader(ctx, e, func(wctx context.Context, tok Token) error {
			close(started)
			<-wctx.Done()
			// Still draining: the shard is ours (revoking) until we return.
			rec := a.Shard(e.Shard())
			got <- obs{context.Cause(wctx), rec.State, rec.Owner, tok}
			return nil
		})
	}()
	<-started
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var o obs
	select {
	case o = <-got:
	case <-ctx.Done():
		t.Fatal("worker not cancelled by the drain")
	}
	if !errors.Is(o.cause, ErrLostOwnership) {
		t.Fatalf("worker cause = %v, want ErrLostOwnership", o.cause)
	}
	if o.ownerOnExit != a.ID() || o.stateOnExit != ShardRevoking {
		t.Fatalf("on worker exit shard was %s/%q, want revoking/a (handover must wait for the worker)", o.stateOnExit, o.ownerOnExit)
	}
	if e.IsLeader() {
		t.Fatal("still leader after drain")
	}
}

func TestResignHandsLeadershipOver(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	b := startMem(t, net, "b")
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*Node{"a": a, "b": b}
	leaderID, err := a.Election("outbox").WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := nodes[leaderID]
	other := nodes[map[string]string{"a": "b", "b": "a"}[leaderID]]
	ev := other.Election("outbox").Events(16)
	defer ev.Close()
	if first := recv(t, ev); first.Kind != LeaderChanged || first.Leader != leaderID {
		t.Fatalf("first event %v, want the current leader", first)
	}
	// a's replica named the leader; the leader acts once its own replica
	// has applied the grant too.
	var oldTok Token
	if !waitTrue(ctx, func() bool { oldTok, err = leader.Election("outbox").Token(); return err == nil }) {
		t.Fatalf("%s never acts as the leader it is: %v", leaderID, err)
	}
	if err := other.Election("outbox").Resign(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Resign by a follower = %v, want ErrNotLeader", err)
	}
	if err := leader.Election("outbox").Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		e := recv(t, ev)
		if e.Kind == BecameLeader {
			if !e.Token.Newer(oldTok) {
				t.Fatalf("new token %s not newer than %s", e.Token, oldTok)
			}
			break
		}
	}
	if leader.Election("outbox").IsLeader() {
		t.Fatalf("the resigner %s still acts as leader", leaderID)
	}
	// The event says the other node acts; acting is time-based (it ends a
	// guard before the lease deadline), so on a loaded machine a missed
	// renewal can pause it for a moment: wait for it rather than sample.
	if !waitTrue(ctx, other.Election("outbox").IsLeader) {
		t.Fatal("leadership did not move to the other node")
	}
}

func TestSubscriptionDropsInsteadOfBlocking(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	// WaitSettled reads the ledger; the event view Subscribe replays is
	// updated after it. Wait for the view itself to name every owner.
	if err := a.waitFor(ctx, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		owned := 0
		for _, v := range a.view {
			if v.owner != "" {
				owned++
			}
		}
		return owned == a.Partitions()
	}); err != nil {
		t.Fatal(err)
	}
	sub := a.Subscribe(1)
	if sub.Dropped() == 0 {
		t.Fatalf("initial state of %d shards fit in a 1-event buffer", a.Partitions())
	}
	sub.Close()
	sub.Close() // idempotent
	if _, ok := <-sub.C(); ok {
		// buffered value may remain; the channel must be closed after it
		if _, ok := <-sub.C(); ok {
			t.Fatal("channel not closed")
		}
	}
}

// counter is an application state machine: sums per shard.
type counter struct {
	mu      sync.Mutex
	applied map[uint32]int
}

func (c *counter) Apply(shard uint32, _ uint64, _ uint64, payload []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied == nil {
		c.applied = make(map[uint32]int)
	}
	if string(payload) == "fail" {
		return nil, errors.New("refused")
	}
	c.applied[shard]++
	return nil, nil
}
func (c *counter) Snapshot() ([]byte, error) { return nil, nil }
func (c *counter) Restore([]byte) error      { return nil }
func (c *counter) get(shard uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied[shard]
}

func TestStaleTokenProposeIsRejected(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	ca, cb := &counter{}, &counter{}
	a := startMem(t, net, "a", func(c *Config) { c.StateMachines = map[string]StateMachine{"count": ca} })
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	tok, err := a.Token(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Propose(ctx, tok, "count", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Propose(ctx, tok, "nope", nil); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := a.Propose(ctx, tok, "count", []byte("fail")); err == nil {
		t.Fatal("state machine error not returned")
	}
	// Move shard 3 away (drain a onto b) and propose with the old token.
	startMem(t, net, "b", func(c *Config) { c.StateMachines = map[string]StateMachine{"count": cb} })
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Propose(ctx, tok, "count", nil); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("stale propose = %v, want ErrStaleToken", err)
	}
	if ca.get(3) != 1 || cb.get(3) != 1 {
		t.Fatalf("applied counts a=%d b=%d, want 1 and 1 (b replayed the log)", ca.get(3), cb.get(3))
	}
}

func TestJobNeverCompletedTwiceAcrossHandover(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a", func(c *Config) { c.JobTimeout = time.Millisecond })
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	job, created, err := a.Enqueue(ctx, JobSpec{Key: "k1", ShardKey: "tenant"})
	if err != nil || !created {
		t.Fatalf("enqueue: %v %v", created, err)
	}
	if again, created, _ := a.Enqueue(ctx, JobSpec{Key: "k1", ShardKey: "tenant"}); created || again.ID != job.ID {
		t.Fatal("idempotency key did not deduplicate")
	}
	tok, err := a.Token(job.Shard)
	if err != nil {
		t.Fatal(err)
	}
	started, err := a.StartJob(ctx, tok, job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartJob(ctx, tok, job); !errors.Is(err, ErrJobState) {
		t.Fatalf("second start with a stale attempt = %v, want ErrJobState", err)
	}
	// a drains (its worker "hangs"); b takes over and restarts the job
	// after its attempt timed out.
	b := startMem(t, net, "b")
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var tokB Token
	if err := b.waitFor(ctx, func() bool { tokB, err = b.Token(job.Shard); return err == nil }); err != nil {
		t.Fatalf("b not acting on shard %d after a drained: %v (last: %v)", job.Shard, err, b.Shard(job.Shard))
	}
	var runnable []Job
	_ = b.waitFor(ctx, func() bool { runnable = b.RunnableJobs(job.Shard); return len(runnable) == 1 })
	restarted, err := b.StartJob(ctx, tokB, runnable[0])
	if err != nil {
		t.Fatal(err)
	}
	if restarted.Attempt != 2 || restarted.AttemptToken() == started.AttemptToken() {
		t.Fatalf("restart attempt %d token %s", restarted.Attempt, restarted.AttemptToken())
	}
	if _, err := a.CompleteJob(ctx, started, nil); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("old owner's completion = %v, want ErrStaleToken", err)
	}
	done, err := b.CompleteJob(ctx, restarted, []byte("r"))
	if err != nil || done.State != JobCompleted {
		t.Fatalf("complete: %v %v", done.State, err)
	}
	if _, err := b.CompleteJob(ctx, restarted, nil); !errors.Is(err, ErrJobState) {
		t.Fatalf("second completion = %v, want ErrJobState", err)
	}
	if got := b.Jobs(JobQuery{States: []JobState{JobCompleted}}); len(got) != 1 {
		t.Fatalf("completed jobs: %v", got)
	}
	if j, err := b.JobByKey("tenant", "k1"); err != nil || j.ID != job.ID {
		t.Fatalf("JobByKey: %v %v", j, err)
	}
}

func TestHealthStepDownAndReport(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	b := startMem(t, net, "b")
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if r := a.Health(); r.Status != Healthy {
		t.Fatalf("health %v %v", r.Status, r.Reasons)
	}
	if err := a.SetHealth(0.1, map[string]string{"cpu": "99%"}); err != nil {
		t.Fatal(err)
	}
	if err := a.waitFor(ctx, func() bool { return len(a.Owned()) == 0 }); err != nil {
		t.Fatal(err)
	}
	// a stops acting as soon as its own replica shows the revokes; b's
	// replica may still be behind it, so wait for b to act on them all.
	if err := b.waitFor(ctx, func() bool { return len(b.Owned()) == b.Partitions() }); err != nil {
		t.Fatalf("b owns %d of %d shards after a stepped down: %v", len(b.Owned()), b.Partitions(), err)
	}
	r := a.Health()
	if r.Status != Degraded || !strings.Contains(strings.Join(r.Reasons, ";"), "health score 0.10 below minimum") {
		t.Fatalf("health %v %v", r.Status, r.Reasons)
	}
	cs := b.Candidates()
	if len(cs) != 2 || cs[0].ID != "a" || cs[0].Healthy || cs[0].Eligible || cs[0].Metadata["cpu"] != "99%" || !cs[1].Eligible {
		t.Fatalf("candidates %+v", cs)
	}
	idx, count, err := b.GroupPosition()
	if err != nil || idx != 1 || count != 2 {
		t.Fatalf("GroupPosition = %d, %d, %v", idx, count, err)
	}
}

func TestGroupElectionStaysInGroup(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	inGroup := func(g string) func(*Config) { return func(c *Config) { c.Group = g } }
	x1 := startMem(t, net, "x1", inGroup("x"))
	y1 := startMem(t, net, "y1", inGroup("y"))
	startMem(t, net, "y2", inGroup("y")) // a third voter: x1 may leave
	ex, err := x1.GroupElection(ctx, "idx")
	if err != nil {
		t.Fatal(err)
	}
	ey, err := y1.GroupElection(ctx, "idx")
	if err != nil {
		t.Fatal(err)
	}
	if ex.Shard() == ey.Shard() || ex.Shard() < uint32(x1.Partitions()) {
		t.Fatalf("group elections share shard %d/%d", ex.Shard(), ey.Shard())
	}
	lx, _ := ex.WaitLeader(ctx)
	ly, _ := ey.WaitLeader(ctx)
	if lx != "x1" || !strings.HasPrefix(ly, "y") {
		t.Fatalf("leaders %q %q", lx, ly)
	}
	// x1 leaves: group x has no candidate, so no leader from group y.
	if err := x1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := y1.Shard(ex.Shard()).Owner; strings.HasPrefix(got, "y") && y1.Shard(ex.Shard()).State != ShardUnowned {
		t.Fatalf("group x election went to %q", got)
	}
}

func TestClosedNode(t *testing.T) {
	ctx := testCtx(t)
	a := startMem(t, NewMemNetwork(), "a")
	sub := a.Subscribe(0)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := a.Token(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Token after Close = %v", err)
	}
	if err := a.RunPerShard(ctx, func(context.Context, Token) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("RunPerShard after Close = %v", err)
	}
	for range sub.C() {
	}
	if r := a.Health(); r.Status != Unhealthy {
		t.Fatalf("health after close: %v", r.Status)
	}
}

// A WorkFunc error stops RunPerShard and is returned.
func TestRunPerShardReturnsWorkError(t *testing.T) {
	ctx := testCtx(t)
	a := startMem(t, NewMemNetwork(), "a")
	boom := errors.New("boom")
	err := a.RunPerShard(ctx, func(ctx context.Context, tok Token) error {
		if tok.Shard == 2 {
			return boom
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("RunPerShard = %v, want boom", err)
	}
}

// A crashed owner's shards go to the survivors.
func TestKilledNodeShardsMove(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	a := startMem(t, net, "a")
	b := startMem(t, net, "b")
	c := startMem(t, net, "c") // three voters: the control group outlives a
	a.Election("x")
	if got := a.Elections(); len(got) != 1 || got[0].Name() != "x" {
		t.Fatalf("Elections() = %v", got)
	}
	if err := b.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	// Settled is not yet three voters: b and c follow the stream until the
	// leader promotes them, and killing a before that kills the only voter
	// (CI: "b and c own 0+0 of 8", Voters [a]).
	if err := a.waitFor(ctx, func() bool { return len(a.Status().Voters) == 3 }); err != nil {
		t.Fatalf("voters %v, want a, b and c: %v", a.Status().Voters, err)
	}
	a.kill()
	// a's shards move once its lease has expired.
	if err := b.waitFor(ctx, func() bool { return len(b.Owned())+len(c.Owned()) == b.Partitions() }); err != nil {
		t.Fatalf("b and c own %d+%d of %d after a crashed: %v", len(b.Owned()), len(c.Owned()), b.Partitions(), err)
	}
}

func TestWatchJobs(t *testing.T) {
	ctx := testCtx(t)
	a := startMem(t, NewMemNetwork(), "a")
	if err := a.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	job, _, err := a.Enqueue(ctx, JobSpec{Key: "before"})
	if err != nil {
		t.Fatal(err)
	}
	w := a.WatchJobs(JobQuery{Shards: []uint32{a.ShardFor("t")}}, 16)
	defer w.Close()
	_ = job
	j, _, err := a.Enqueue(ctx, JobSpec{Key: "k", ShardKey: "t"})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := a.Token(j.Shard)
	started, err := a.StartJob(ctx, tok, j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CompleteJob(ctx, started, nil); err != nil {
		t.Fatal(err)
	}
	for first := true; ; first = false {
		ev := recv(t, w)
		if ev.Job.Key != "k" {
			t.Fatalf("event for a job outside the query: %+v", ev)
		}
		if ev.Created != first {
			t.Fatalf("event %+v: Created = %v, want %v (only the first event of a job is its creation)", ev, ev.Created, first)
		}
		if ev.Job.State == JobCompleted {
			break
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	cfg := ConfigFromEnv(func(string) string { return "" })
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"-node-id", "n7", "-seeds", "a:1, b:2", "-profile", "fast",
		"-encrypt-key", "MDEyMzQ1Njc4OWFiY2RlZg==", "-job-timeout", "3s", "-data-dir", "/d", "-raft-advertise", "10.0.0.1:7947",
		"-tls-ca", "/t/ca.pem", "-tls-cert", "/t/n7.pem", "-tls-key", "/t/n7-key.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != "n7" || len(cfg.Seeds) != 2 || cfg.Seeds[1] != "b:2" || cfg.Profile != ProfileFast ||
		len(cfg.EncryptionKey) != 16 || cfg.JobTimeout != 3*time.Second {
		t.Fatalf("parsed %+v", cfg)
	}
	// The settings `tenure agent` takes from RegisterFlags too.
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-voter", "never", "-voters-own-shards=false", "-tags", "zone=a, rack=r1",
		"-max-pending-jobs", "7", "-manual-finalize", "-cluster", "blue"}); err != nil {
		t.Fatal(err)
	}
	if cfg.Voter != VoterNever || !cfg.VoterOwnsNoShards || cfg.Tags["rack"] != "r1" || len(cfg.Tags) != 2 ||
		cfg.MaxPendingJobs != 7 || !cfg.ManualFinalize || cfg.Cluster != "blue" {
		t.Fatalf("parsed %+v", cfg)
	}
	if got := fs.Lookup("voters-own-shards").Value.String(); got != "false" {
		t.Fatalf("voters-own-shards reads %q, want false", got)
	}
	if got := fs.Lookup("encrypt-key").Value.String(); got != "<redacted>" {
		t.Fatalf("encrypt-key prints %q", got)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-profile", "warp"}); err == nil || !strings.Contains(err.Error(), "warp") {
		t.Fatalf("bad profile accepted: %v", err)
	}
}

func TestConcurrentClose(t *testing.T) {
	ctx := testCtx(t)
	a := startMem(t, NewMemNetwork(), "a")
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- a.Close(ctx) }()
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, ErrClosed) || errors.Is(e2, ErrClosed)) {
		t.Fatalf("Close twice concurrently: %v, %v; want one nil and one ErrClosed", e1, e2)
	}
}
