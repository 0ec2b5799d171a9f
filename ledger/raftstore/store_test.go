package raftstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/commit"
	"github.com/tenurehq/tenure/ledger"
)

func TestOpenStoreLockedAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, StoreOptions{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ledger.ErrStoreLocked) {
		t.Fatalf("second open: %v, want ledger.ErrStoreLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	s.Close()

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "raft.db"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(bad, StoreOptions{}); !errors.Is(err, ledger.ErrStoreCorrupt) {
		t.Fatalf("open of a zeroed raft.db: %v, want ledger.ErrStoreCorrupt", err)
	}
}

// startSingle starts a one-voter raft on the data dir (bootstrapping it
// the first time) and waits until it leads and has applied its log.
func startSingle(t *testing.T, dir string, snapshotThreshold uint64) (*raft.Raft, *ledger.FSM, *counterSM, *Store) {
	t.Helper()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, sm := newTestFSM(t, ledger.DefaultConfig())
	cfg := fastRaftConfig("solo")
	cfg.SnapshotThreshold = snapshotThreshold
	cfg.TrailingLogs = 10
	_, tr := raft.NewInmemTransport("solo")
	r, err := raft.NewRaft(cfg, f, st.Log, st.Stable, st.Snapshots, tr)
	if err != nil {
		t.Fatal(err)
	}
	has, err := raft.HasExistingState(st.Log, st.Stable, st.Snapshots)
	if err != nil {
		t.Fatal(err)
	}
	if !has {
		if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "solo", Address: tr.LocalAddr()}}}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-r.LeaderCh():
	case <-ctx.Done():
		t.Fatal("no leadership")
	}
	if err := r.Barrier(10 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	return r, f, sm, st
}

// TestRestartOnBoltFiles: every acknowledged command survives a restart on
// real bolt files, with and without a snapshot in between; the application
// state machine is rebuilt too.
func TestRestartOnBoltFiles(t *testing.T) {
	dir := t.TempDir()
	r, f, _, st := startSingle(t, dir, 1<<20)
	ctx := context.Background()
	b, err := commit.NewBatcher(commit.RaftApplier{Raft: r, Timeout: 10 * time.Second}, commit.BatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply := func(c ledger.Command) ledger.Result {
		t.Helper()
		res, err := b.Apply(ctx, c)
		if err != nil || res.Err != nil {
			t.Fatalf("%#v: %v %v", c, err, res.Err)
		}
		return res
	}
	mustApply(ledger.Heartbeat{Node: "a", Incarnation: 1})
	mustApply(ledger.Grant{Shard: 1, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1})
	var acked []uint64
	for i := range 30 {
		acked = append(acked, mustApply(ledger.JobEnqueue{Shard: 1, Key: fmt.Sprint("k", i)}).Job.ID)
		mustApply(ledger.App{Shard: 1, Epoch: 1, Type: "counter", Payload: []byte(fmt.Sprint("p", i))})
		if i == 15 {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := dumpState(f.State())
	b.Close()
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	st.Close()

	r, f, sm, st := startSingle(t, dir, 1<<20)
	defer func() { r.Shutdown().Error(); st.Close() }()
	// The barrier applied the whole log.
	got := f.State()
	for _, id := range acked {
		if _, ok := got.Job(id); !ok {
			t.Fatalf("acknowledged job %d lost over restart", id)
		}
	}
	if len(sm.logs[1]) != 30 {
		t.Fatalf("application state after restart: %d entries, want 30: %v", len(sm.logs[1]), sm.logs[1])
	}
	if got := dumpState(got); got != want {
		t.Fatalf("state after restart differs:\n%s\nvs\n%s", got, want)
	}
}
