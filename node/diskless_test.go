package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// disklessConfig is node i of an n-node cluster on tr, as a disk-less
// member.
func disklessConfig(tr *MemNetwork, i, n int) Config {
	cfg := memNetConfig(tr, i, n)
	cfg.Voter, cfg.Diskless = VoterNever, true
	return cfg
}

// startAll starts cfgs at once (voters must see each other to bootstrap).
func startAll(t *testing.T, ctx context.Context, cfgs []Config) []*Node {
	t.Helper()
	nodes := make([]*Node, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { nodes[i], errs[i] = Start(ctx, cfgs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start: %v", err)
	}
	return nodes
}

// TestDisklessMembers: three voters keep their storage, two disk-less
// members keep none. The members get incarnations from the control group
// (the claim's log index on a first start, one more on every restart,
// crash or graceful),
// rebuild their replicas, own shards; a second live process with a
// member's id is refused and the first keeps its incarnation.
func TestDisklessMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(7)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cfgs := []Config{memNetConfig(tr, 0, 5), memNetConfig(tr, 1, 5), memNetConfig(tr, 2, 5),
			disklessConfig(tr, 3, 5), disklessConfig(tr, 4, 5)}
		for i := range cfgs {
			cfgs[i].BootstrapExpect = 3
		}
		nodes := startAll(t, ctx, cfgs)
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		// A first claim gets the claim's log index (cluster version 4,
		// ledger.VersionForgetNodes), every later one the next number.
		first := map[string]uint64{}
		for _, n := range nodes[3:] {
			first[n.ID()] = n.Incarnation()
			if n.Incarnation() == 0 {
				t.Errorf("%s: first incarnation 0", n.ID())
			}
		}
		ownedBy := func(id string) int {
			c := 0
			for _, s := range nodes[0].Shards() {
				if s.Owner == id && s.Valid {
					c++
				}
			}
			return c
		}
		if ownedBy("n4") == 0 || ownedBy("n5") == 0 {
			t.Errorf("members own no shards: n4 %d, n5 %d", ownedBy("n4"), ownedBy("n5"))
		}

		// A crash: the restarted member has no storage and the next
		// incarnation; its replica is rebuilt.
		tr.Crash(nodes[3])
		n4, err := Start(ctx, cfgs[3])
		if err != nil {
			t.Fatalf("restart n4: %v", err)
		}
		nodes[3] = n4
		if n4.Incarnation() != first["n4"]+1 {
			t.Errorf("restarted n4: incarnation %d, want %d", n4.Incarnation(), first["n4"]+1)
		}
		if err := n4.WaitSettled(ctx); err != nil {
			t.Fatalf("n4 not settled after its restart: %v", err)
		}
		if got, want := len(n4.Shards()), cfgs[3].Partitions; got != want {
			t.Errorf("restarted n4 sees %d shards, want %d (replica not rebuilt)", got, want)
		}

		// A duplicate of a live member is refused; the member is untouched.
		dup := cfgs[4]
		dup.GossipAddr, dup.RaftAddr = "10.0.0.9:7946", "10.0.0.9:7947"
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		second, err := Start(sctx, dup)
		scancel()
		if err == nil {
			_ = second.Close(ctx)
			t.Fatal("a second process with n5's id started")
		}
		if !errors.Is(err, ErrDuplicateID) {
			t.Fatalf("duplicate n5: %v, want ErrDuplicateID", err)
		}
		if nodes[4].Incarnation() != first["n5"] {
			t.Fatalf("n5's incarnation moved to %d", nodes[4].Incarnation())
		}
		for _, m := range nodes[0].Members() {
			if m.ID == "n5" && (m.Incarnation != first["n5"] || m.Addr != cfgs[4].GossipAddr || !m.Live) {
				t.Fatalf("n1 sees n5 as %+v after the duplicate was refused", m)
			}
		}

		// A graceful stop and start: the next incarnation again.
		if err := nodes[4].Close(ctx); err != nil {
			t.Fatalf("close n5: %v", err)
		}
		n5, err := Start(ctx, cfgs[4])
		if err != nil {
			t.Fatalf("restart n5: %v", err)
		}
		nodes[4] = n5
		if n5.Incarnation() != first["n5"]+1 {
			t.Errorf("restarted n5: incarnation %d, want %d", n5.Incarnation(), first["n5"]+1)
		}
		if err := n5.WaitSettled(ctx); err != nil {
			t.Fatalf("n5 not settled after its restart: %v", err)
		}
		// Members first: they leave through the voters' leader.
		for i := len(nodes) - 1; i >= 0; i-- {
			if err := nodes[i].Close(ctx); err != nil {
				t.Errorf("close %s: %v", nodes[i].ID(), err)
			}
		}
	})
}

// TestDisklessNeedsVersion3: in a cluster that runs version 2 (its voters
// speak no newer), a disk-less member's start fails at once with
// ErrDisklessUnsupported, and nothing reaches the log.
func TestDisklessNeedsVersion3(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(8)
		var mu sync.Mutex
		claims := 0
		tr.OnApply = func(_ string, _ uint64, _ uint64, c ledger.Command, _ ledger.Result) {
			if _, ok := ledger.Unwrap(c).(ledger.ClaimIncarnation); ok {
				mu.Lock()
				claims++
				mu.Unlock()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		v := memNetConfig(tr, 0, 2)
		v.BootstrapExpect, v.speakMax = 1, ledger.VersionDisklessMembers-1
		voter := startAll(t, ctx, []Config{v})[0]
		if err := voter.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
		m := disklessConfig(tr, 1, 2)
		m.BootstrapExpect = 1
		n, err := Start(ctx, m)
		if err == nil {
			_ = n.Close(ctx)
			t.Fatal("a disk-less member started in a version-2 cluster")
		}
		if !errors.Is(err, ErrDisklessUnsupported) || !strings.Contains(err.Error(), "version") {
			t.Fatalf("start: %v, want ErrDisklessUnsupported naming the version", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if claims != 0 {
			t.Fatalf("%d incarnation claims reached the log of a version-2 cluster", claims)
		}
		if err := voter.Close(ctx); err != nil {
			t.Error(err)
		}
	})
}

// TestDisklessConfig: a voter needs a DataDir; the error names the field.
func TestDisklessConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"member without data dir", func(c *Config) { c.Voter = VoterNever }, ""},
		{"voter without data dir", func(c *Config) {}, "DataDir empty"},
		{"always-voter without data dir", func(c *Config) { c.Voter = VoterAlways }, `Voter="never"`},
		{"diskless voter", func(c *Config) { c.Diskless = true }, `Voter "" without DataDir`},
		{"diskless with data dir", func(c *Config) { c.Diskless, c.Voter, c.DataDir = true, VoterNever, "/x" }, "Diskless with DataDir"},
		{"member without seeds", func(c *Config) { c.Voter, c.Seeds = VoterNever, nil }, "Seeds empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ConfigFromEnv(func(string) string { return "" })
			c.NodeID = "m1"
			c.GossipAddr, c.RaftAddr = "127.0.0.1:7946", "127.0.0.1:7947"
			c.Seeds = []string{"127.0.0.1:8946"}
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("%v does not match ErrInvalidConfig", err)
			}
		})
	}
}

// TestDisklessMemberClosesAfterVoters: voters stopped before a member (a
// whole-cluster stop in the wrong order) leave the member no leader to
// hear its leave; its Close still succeeds, within a few election
// timeouts, instead of failing with "no raft leader".
func TestDisklessMemberClosesAfterVoters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(11)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cfgs := []Config{memNetConfig(tr, 0, 4), memNetConfig(tr, 1, 4), memNetConfig(tr, 2, 4),
			disklessConfig(tr, 3, 4)}
		for i := range cfgs {
			cfgs[i].BootstrapExpect = 3
		}
		nodes := startAll(t, ctx, cfgs)
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		var wg sync.WaitGroup
		for _, n := range nodes[:3] {
			wg.Go(func() {
				if err := n.Close(ctx); err != nil {
					t.Errorf("close voter %s: %v", n.ID(), err)
				}
			})
		}
		wg.Wait()
		start := time.Now()
		if err := nodes[3].Close(ctx); err != nil {
			t.Errorf("close member %s after every voter: %v", nodes[3].ID(), err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("member close took %v", d)
		}
	})
}

// TestDisklessMemberForgotten: a disk-less member that crashed for good
// is forgotten by the leader once it has been gone ForgetAfter and owns
// nothing (ForgetNode); a process of the same id that starts afterwards
// claims an incarnation above every earlier one and owns shards again,
// and no shard record names the old incarnation.
func TestDisklessMemberForgotten(t *testing.T) {
	defer func(old func(*ownership.Config)) { tuneOwnership = old }(tuneOwnership)
	tuneOwnership = func(c *ownership.Config) { c.ForgetAfter = 5 * time.Second }
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(13)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cfgs := []Config{memNetConfig(tr, 0, 4), memNetConfig(tr, 1, 4), memNetConfig(tr, 2, 4),
			disklessConfig(tr, 3, 4)}
		for i := range cfgs {
			cfgs[i].BootstrapExpect = 3
		}
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
		old := nodes[3].Incarnation()
		state := func() *ledger.State { return nodes[0].be.(*netBackend).fsm.State() }
		tr.Crash(nodes[3])
		if !waitTrue(ctx, func() bool { _, ok := state().Node("n4"); return !ok }) {
			t.Fatalf("n4 never forgotten: %+v", state().Nodes())
		}
		for _, rec := range state().Shards() {
			if rec.Owner == "n4" && rec.State != ledger.ShardUnowned {
				t.Fatalf("shard %d still names the forgotten n4: %+v", rec.Shard, rec)
			}
		}
		n4, err := Start(ctx, cfgs[3])
		if err != nil {
			t.Fatalf("restart n4: %v", err)
		}
		nodes[3] = n4
		if n4.Incarnation() <= old {
			t.Fatalf("n4 came back at incarnation %d, not above its forgotten %d", n4.Incarnation(), old)
		}
		if err := n4.WaitSettled(ctx); err != nil {
			t.Fatalf("n4 not settled after coming back: %v", err)
		}
		if !waitTrue(ctx, func() bool { return len(n4.Owned()) > 0 }) {
			t.Fatal("n4 owns nothing after coming back")
		}
		for _, rec := range state().Shards() {
			if rec.Owner == "n4" && rec.OwnerIncarnation == old {
				t.Fatalf("shard %d granted to n4's forgotten incarnation %d", rec.Shard, old)
			}
		}
	})
}

// lateClaimer is a control group whose first answer to an incarnation
// claim is lost: with lose "late" the attempt is still queued at the
// leader when the member gives up on it and commits after the retry
// (the order of run 1 of the 100-agent bench, docs/benchmarks.md); with
// "lost" it committed at once and only the answer was lost.
type lateClaimer struct {
	fsm   *ledger.FSM
	idx   uint64
	lose  string
	calls int
	held  [][]byte
}

func (c *lateClaimer) apply(data []byte) ledger.Result {
	cmd, err := ledger.Decode(data)
	if err != nil {
		return ledger.Result{Err: err}
	}
	c.idx++
	return c.fsm.ApplyCommand(c.idx, cmd)
}

func (c *lateClaimer) ApplyViaPeers(ctx context.Context, data []byte) (ledger.Result, error) {
	c.calls++
	if c.calls == 1 {
		switch c.lose {
		case "late":
			c.held = append(c.held, data)
		case "lost":
			c.apply(data)
		}
		return ledger.Result{}, context.DeadlineExceeded
	}
	return c.apply(data), nil
}

func (c *lateClaimer) SetIncarnation(uint64) {}

// TestDisklessClaimLateAttempt: a disk-less member's claim attempt that
// timed out and commits after the retry's (or whose answer was lost after
// it committed) does not take another incarnation: the process's
// incarnation is the one the ledger holds for its id once every attempt
// applied, so its first heartbeat is not refused as an identity conflict
// (mutation.ClaimWithoutRequestID breaks it).
func TestDisklessClaimLateAttempt(t *testing.T) {
	for _, lose := range []string{"late", "lost"} {
		t.Run(lose, func(t *testing.T) {
			fsm, err := ledger.NewFSM(ledger.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			cl := &lateClaimer{fsm: fsm, lose: lose}
			if r := fsm.ApplyCommand(1, ledger.ClusterConfig{Name: "c", Partitions: 4, Version: 5}); r.Err != nil {
				t.Fatal(r.Err)
			}
			cl.idx = 1
			b := &netBackend{id: "m1"}
			inc, index, err := b.claimIncarnation(testCtx(t), cl)
			if err != nil {
				t.Fatal(err)
			}
			for _, data := range cl.held { // the late attempt commits now
				if r := cl.apply(data); r.Err != nil {
					t.Fatalf("late attempt: %v", r.Err)
				}
			}
			rec, _ := fsm.State().Node("m1")
			if cl.calls != 2 || rec.Incarnation != inc {
				t.Fatalf("after %d attempts the process holds incarnation %d (claim index %d), the ledger %+v: "+
					"its first heartbeat would be refused as an identity conflict", cl.calls, inc, index, rec)
			}
			hb := ledger.Heartbeat{Node: "m1", Incarnation: inc, Liveness: rec.Liveness, Now: 99,
				MinVersion: ledger.MinClusterVersion, MaxVersion: ledger.MaxClusterVersion}
			if r := fsm.ApplyCommand(cl.idx+1, hb); r.Err != nil {
				t.Fatalf("first heartbeat at incarnation %d: %v", inc, r.Err)
			}
		})
	}
}
