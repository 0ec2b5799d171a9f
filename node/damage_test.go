package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ledger/raftstore"
)

// TestStartDamagedDataDir: a data dir whose store or identity is damaged
// is refused at once with an errors.Is-able error whose message names the
// file and the way out; a fresh data dir still starts.
func TestStartDamagedDataDir(t *testing.T) {
	identity := func(t *testing.T, dir string) {
		t.Helper()
		if _, err := cluster.LoadIdentity(dir, "solo"); err != nil {
			t.Fatal(err)
		}
	}
	store := func(t *testing.T, dir string) {
		t.Helper()
		st, err := raftstore.OpenStore(filepath.Join(dir, "raft"), raftstore.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write := func(t *testing.T, path string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantErr error
		want    []string
	}{
		{"raft.db missing next to the identity", func(t *testing.T, dir string) {
			identity(t, dir)
		}, ledger.ErrStoreCorrupt, []string{"raft.db is missing next to this node's identity", "term, vote and log"}},
		{"raft dir removed after a run", func(t *testing.T, dir string) {
			store(t, dir)
			identity(t, dir)
			if err := os.RemoveAll(filepath.Join(dir, "raft")); err != nil {
				t.Fatal(err)
			}
		}, ledger.ErrStoreCorrupt, []string{"raft.db is missing", "term, vote and log"}},
		{"0-byte raft.db next to the identity", func(t *testing.T, dir string) {
			identity(t, dir)
			write(t, filepath.Join(dir, "raft", "raft.db"), nil)
		}, ledger.ErrStoreCorrupt, []string{"raft.db is empty (0 bytes)", "term, vote and log"}},
		{"garbage raft.db", func(t *testing.T, dir string) {
			identity(t, dir)
			write(t, filepath.Join(dir, "raft", "raft.db"), []byte(strings.Repeat("not a bolt file ", 1024)))
		}, ledger.ErrStoreCorrupt, []string{"raft.db", "both meta pages are invalid"}},
		{"garbage incarnation file", func(t *testing.T, dir string) {
			store(t, dir)
			identity(t, dir)
			write(t, filepath.Join(dir, "incarnation"), []byte{0xff, 0x00, 0x13})
		}, cluster.ErrBadIdentity, []string{filepath.Join("incarnation") + " is damaged"}},
		{"incarnation file lost", func(t *testing.T, dir string) {
			store(t, dir)
			identity(t, dir)
			if err := os.Remove(filepath.Join(dir, "incarnation")); err != nil {
				t.Fatal(err)
			}
		}, cluster.ErrBadIdentity, []string{"incarnation counter was lost"}},
		{"empty node-id file", func(t *testing.T, dir string) {
			store(t, dir)
			identity(t, dir)
			write(t, filepath.Join(dir, "node-id"), nil)
		}, cluster.ErrBadIdentity, []string{"node-id is damaged"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, err := Start(ctx, soloConfig(t, dir, nil))
			if err == nil {
				n.Close(ctx)
				t.Fatal("started on a damaged data dir")
			}
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if ctx.Err() != nil {
				t.Fatalf("refused only when the context ended: %v", err)
			}
			for _, w := range append(c.want, dir, "rejoin as a new member") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("fresh data dir starts", func(t *testing.T) {
		withSolo(t)
		ctx := testCtx(t)
		n, err := Start(ctx, soloConfig(t, filepath.Join(t.TempDir(), "new"), nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStartWipedDataDirReusingID: a node whose storage was wiped comes
// back under its old id, which the control group has registered at a
// newer incarnation. Start fails fast with ErrIdentityConflict (it used to
// wait at "joining" until the context ended); the cluster stays healthy,
// and the same node under a new id joins.
func TestStartWipedDataDirReusingID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(7)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		nodes := make([]*Node, 3)
		errs := make([]error, 3)
		var started []*Node
		defer func() { // on failure too: a bubble must end with no node running
			for _, n := range started {
				if n != nil {
					_ = n.Close(ctx)
				}
			}
			// memberlist's in-flight probes (probeNode, an indirect ping's
			// nack timer) have no shutdown case: they end on their own
			// timers, which in the bubble only fire while it runs. Let
			// virtual time pass them, or the bubble ends with them blocked.
			time.Sleep(time.Minute)
		}()
		var wg sync.WaitGroup
		for i := range nodes {
			wg.Go(func() { nodes[i], errs[i] = Start(ctx, memNetConfig(tr, i, 3)) })
		}
		wg.Wait()
		started = append(started, nodes...)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("start n%d: %v", i+1, err)
			}
		}
		// A restart registers n3 at incarnation 2.
		tr.Crash(nodes[2])
		n3, err := Start(ctx, memNetConfig(tr, 2, 3))
		started = append(started, n3)
		if err != nil {
			t.Fatalf("restart n3: %v", err)
		}
		if n3.Incarnation() != 2 {
			t.Fatalf("restarted at incarnation %d", n3.Incarnation())
		}
		// The disk is lost: n3 comes back blank, at incarnation 1.
		tr.Crash(n3)
		tr.Forget("n3")
		startCtx, stop := context.WithTimeout(ctx, 5*time.Minute)
		defer stop()
		_, err = Start(startCtx, memNetConfig(tr, 2, 3))
		if !errors.Is(err, ErrIdentityConflict) {
			t.Fatalf("start of the wiped n3: %v, want ErrIdentityConflict", err)
		}
		if startCtx.Err() != nil {
			t.Fatalf("refused only when the context ended: %v", err)
		}
		for _, w := range []string{`node "n3" registered at incarnation 2`, "incarnation 1", "new node id", "replaces the old member"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("message %q lacks %q", err, w)
			}
		}
		tr.Forget("n3")
		// The same machine under a new id joins.
		cfg := memNetConfig(tr, 2, 3)
		cfg.NodeID = "n3b"
		n3b, err := Start(ctx, cfg)
		started = append(started, n3b)
		if err != nil {
			t.Fatalf("start under a new id: %v", err)
		}
		for _, n := range []*Node{nodes[0], nodes[1], n3b} {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		for _, n := range []*Node{n3b, nodes[0], nodes[1]} {
			if err := n.Close(ctx); err != nil {
				t.Errorf("close %s: %v", n.ID(), err)
			}
		}
		started = nil
	})
}
