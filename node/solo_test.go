package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/cluster/commit"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// soloControl is a single-voter Raft control plane over an in-memory
// transport: it lets the real backend (gossip on loopback, bolt storage,
// the ledger, planner and tracker) run in one process without the
// cluster's control group.
type soloControl struct {
	r     *raft.Raft
	id    string
	renew func(time.Time, cluster.RenewRequest) (ledger.NodeRecord, error)
	lead  chan bool
	done  chan struct{}
}

func newSoloControl(d controlDeps) (controlPlane, error) {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(d.id)
	rc.HeartbeatTimeout = 50 * time.Millisecond
	rc.ElectionTimeout = 50 * time.Millisecond
	rc.LeaderLeaseTimeout = 50 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	rc.LogOutput = nil
	rc.LogLevel = "off"
	if testing.Verbose() {
		rc.LogLevel = "debug"
		rc.LogOutput = os.Stderr
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(d.id))
	hasState, err := raft.HasExistingState(d.store.Log, d.store.Stable, d.store.Snapshots)
	if err != nil {
		return nil, err
	}
	notify := make(chan bool, 8)
	rc.NotifyCh = notify
	r, err := raft.NewRaft(rc, d.fsm, d.store.Log, d.store.Stable, d.store.Snapshots, trans)
	if err != nil {
		return nil, err
	}
	if !hasState {
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}})
		if err := f.Error(); err != nil {
			return nil, err
		}
	}
	c := &soloControl{r: r, id: d.id, renew: d.renew, lead: make(chan bool, 8), done: make(chan struct{})}
	go func() {
		for {
			select {
			case <-c.done:
				return
			case l := <-notify:
				if l {
					if err := r.Barrier(time.Second).Error(); err != nil {
						continue
					}
				}
				select {
				case c.lead <- l:
				case <-c.done:
					return
				}
			}
		}
	}()
	return c, nil
}

func (c *soloControl) Apply(ctx context.Context, cmd []byte) (ledger.Result, error) {
	return commit.RaftApplier{Raft: c.r, Timeout: time.Second}.Apply(ctx, cmd)
}

func (c *soloControl) Barrier(context.Context) error {
	if err := c.r.Barrier(time.Second).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return fmt.Errorf("%w: %w", ownership.ErrNotLeader, err)
		}
		return err
	}
	return nil
}

func (c *soloControl) Leadership() <-chan bool { return c.lead }

func (c *soloControl) Leader() string {
	_, id := c.r.LeaderWithID()
	return string(id)
}

// Renew is the leader's side at once: one voter is its own quorum.
func (c *soloControl) Renew(_ context.Context, node string, inc, liveness uint64) (uint64, ledger.NodeRecord, error) {
	if c.r.State() != raft.Leader || c.renew == nil {
		return 0, ledger.NodeRecord{}, ownership.ErrNotLeader
	}
	commit := c.r.LastIndex()
	rec, err := c.renew(time.Now(), cluster.RenewRequest{Node: node, Incarnation: inc, Liveness: liveness})
	if err != nil {
		return 0, rec, err
	}
	return commit, rec, nil
}

// ReadIndex: one voter is its own quorum.
func (c *soloControl) ReadIndex(context.Context) (uint64, error) {
	if c.r.State() != raft.Leader {
		return 0, ownership.ErrNotLeader
	}
	return c.r.LastIndex(), nil
}

// EstablishBound: a single voter confirmed nothing for an earlier leader
// but itself; now is always safe.
func (c *soloControl) EstablishBound(_ context.Context, now time.Time) time.Time { return now }

func (c *soloControl) Words(context.Context, string) ([]byte, error) {
	return nil, cluster.ErrWordsUnsupported
}

func (c *soloControl) SendOwnerWord(context.Context, []byte) error { return cluster.ErrNotLeader }

func (c *soloControl) Voters() []string { return []string{c.id} }
func (c *soloControl) Addr() string     { return "" }

func (c *soloControl) Shutdown(context.Context) error {
	select {
	case <-c.done:
		return nil
	default:
		close(c.done)
	}
	return c.r.Shutdown().Error()
}

// soloIdentity persists an incarnation counter like cluster.LoadIdentity.
func soloIdentity(dir, id string) (string, uint64, error) {
	p := filepath.Join(dir, "incarnation-test")
	var inc uint64
	if b, err := os.ReadFile(p); err == nil {
		inc, _ = strconv.ParseUint(string(b), 10, 64)
	}
	inc++
	if err := os.WriteFile(p, []byte(strconv.FormatUint(inc, 10)), 0o600); err != nil {
		return "", 0, err
	}
	return id, inc, nil
}

// withSolo swaps in the single-voter control plane for one test.
func withSolo(t *testing.T) {
	t.Helper()
	oldCtl, oldID := newControlPlane, loadIdentity
	newControlPlane, loadIdentity = newSoloControl, soloIdentity
	t.Cleanup(func() { newControlPlane, loadIdentity = oldCtl, oldID })
}

func soloConfig(_ testing.TB, dir string, sms map[string]StateMachine) Config {
	cfg := ConfigFromEnv(func(string) string { return "" })
	cfg.NodeID = "solo"
	cfg.Profile = ProfileFast
	cfg.Partitions = 8
	cfg.BootstrapExpect = 1
	cfg.DataDir = dir
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.StateMachines = sms
	cfg.JobTimeout = 200 * time.Millisecond
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return cfg
}

// The real backend on one node: registration through heartbeats, the
// leader loop granting every shard, fenced commands and jobs, drain, and
// a restart that replays the log into the application state machine.
func TestRealBackendSingleNode(t *testing.T) {
	withSolo(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	sm := &counter{}
	n, err := Start(ctx, soloConfig(t, dir, map[string]StateMachine{"count": sm}))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(n.Owned()); got != 8 {
		t.Fatalf("owns %d of 8 shards", got)
	}
	if r := n.Health(); r.Status != Healthy {
		t.Fatalf("health %v %v", r.Status, r.Reasons)
	}
	if lr := n.LeaseRemaining(3); lr <= 0 || lr > time.Second {
		t.Fatalf("lease remaining %v", lr)
	}
	tok, err := n.Token(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Propose(ctx, tok, "count", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Propose(ctx, Token{Shard: 3, Epoch: tok.Epoch - 1}, "count", nil); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("stale propose = %v", err)
	}
	job, created, err := n.Enqueue(ctx, JobSpec{Key: "k", ShardKey: "t"})
	if err != nil || !created {
		t.Fatalf("enqueue %v %v", created, err)
	}
	if _, created, _ := n.Enqueue(ctx, JobSpec{Key: "k", ShardKey: "t"}); created {
		t.Fatal("duplicate enqueue created a job")
	}
	jt, _ := n.Token(job.Shard)
	started, err := n.StartJob(ctx, jt, job)
	if err != nil {
		t.Fatal(err)
	}
	done, err := n.CompleteJob(ctx, started, []byte("r"))
	if err != nil || done.State != JobCompleted {
		t.Fatalf("complete %v %v", done.State, err)
	}
	if _, err := n.CompleteJob(ctx, started, nil); !errors.Is(err, ErrJobState) {
		t.Fatalf("second completion = %v", err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if sm.get(3) != 1 {
		t.Fatalf("applied %d", sm.get(3))
	}

	// Restart: the log is replayed into a fresh state machine.
	sm2 := &counter{}
	n2, err := Start(ctx, soloConfig(t, dir, map[string]StateMachine{"count": sm2}))
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close(ctx)
	if n2.Incarnation() != 2 {
		t.Fatalf("incarnation %d", n2.Incarnation())
	}
	if err := n2.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if sm2.get(3) != 1 {
		t.Fatalf("restarted state machine applied %d", sm2.get(3))
	}
	if j, err := n2.Job(job.ID); err != nil || j.State != JobCompleted {
		t.Fatalf("job after restart %v %v", j.State, err)
	}
}
