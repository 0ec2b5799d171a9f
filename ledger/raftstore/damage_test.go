//go:build !wasip1

package raftstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/commit"
	"github.com/tenurehq/tenure/ledger"
)

// goodDataDir builds a data dir with a multi-page raft.db, a snapshot and a
// compacted log (first index > 1), shut down cleanly.
func goodDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	r, _, _, st := startSingle(t, dir, 1<<20)
	b, err := commit.NewBatcher(commit.RaftApplier{Raft: r, Timeout: 10 * time.Second}, commit.BatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Apply(ctx, ledger.Heartbeat{Node: "a", Incarnation: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if _, err := b.Apply(ctx, ledger.JobEnqueue{Shard: 1, Key: fmt.Sprint("key-", i), Payload: make([]byte, 300)}); err != nil {
			t.Fatal(err)
		}
		if i == 40 {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.Close()
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyDir copies the data dir src into a new temp dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// editFile applies f to the bytes of path.
func editFile(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newestSnapshot returns the path of the newest snapshot dir.
func newestSnapshot(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil || len(es) == 0 {
		t.Fatalf("no snapshot in %s: %v", dir, err)
	}
	return filepath.Join(dir, "snapshots", es[len(es)-1].Name())
}

// TestOpenStoreDamaged: every kind of damage to raft.db and the snapshots
// is refused with ledger.ErrStoreCorrupt and a message naming the file and the
// way out, never a panic or a fault.
func TestOpenStoreDamaged(t *testing.T) {
	good := goodDataDir(t)
	ps := os.Getpagesize()
	ord := binary.NativeEndian
	meta := func(b []byte, page int) []byte { return b[page*ps+16:] }
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string // in the message
	}{
		{"empty raft.db", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func([]byte) []byte { return nil })
		}, "empty (0 bytes)"},
		{"shorter than a meta page", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte { return b[:50] })
		}, "truncated"},
		{"one page left", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte { return b[:ps] })
		}, "truncated"},
		{"cut mid-page", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte { return b[:len(b)-ps/2] })
		}, "not a multiple of the page size"},
		{"cut below the high-water mark", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte {
				hwm := max(ord.Uint64(meta(b, 0)[40:]), ord.Uint64(meta(b, 1)[40:]))
				return b[:(int(hwm)-1)*ps]
			})
		}, "truncated: the meta page counts"},
		{"bad magic in both metas", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte {
				ord.PutUint32(meta(b, 0), 0xdeadbeef)
				ord.PutUint32(meta(b, 1), 0xdeadbeef)
				return b
			})
		}, "bad magic"},
		{"bad version in both metas", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte {
				ord.PutUint32(meta(b, 0)[4:], 3)
				ord.PutUint32(meta(b, 1)[4:], 3)
				return b
			})
		}, "format version 3"},
		{"bad checksum in both metas", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte {
				meta(b, 0)[48]++ // txid
				meta(b, 1)[48]++
				return b
			})
		}, "checksum"},
		{"zeroed file", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte { return make([]byte, len(b)) })
		}, "both meta pages are invalid"},
		{"root page zeroed", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte {
				for _, m := range []int{0, 1} {
					root := int(ord.Uint64(meta(b, m)[16:]))
					clear(b[root*ps : (root+1)*ps])
				}
				return b
			})
		}, "page"},
		{"raft.db is a directory", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "raft.db")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"snapshot meta.json garbage", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(newestSnapshot(t, dir), "meta.json"), func([]byte) []byte { return []byte("{not json") })
		}, "meta.json"},
		{"snapshot state.bin truncated", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(newestSnapshot(t, dir), "state.bin"), func(b []byte) []byte { return b[:len(b)/2] })
		}, "truncated?"},
		{"snapshot state.bin flipped byte", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(newestSnapshot(t, dir), "state.bin"), func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b })
		}, "CRC-64"},
		{"snapshot state.bin missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(newestSnapshot(t, dir), "state.bin")); err != nil {
				t.Fatal(err)
			}
		}, "state.bin"},
		{"snapshots deleted under a compacted log", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
				t.Fatal(err)
			}
		}, "no snapshot of the entries before it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, good)
			c.damage(t, dir)
			st, err := OpenStore(dir, StoreOptions{LockTimeout: 100 * time.Millisecond})
			if err == nil {
				st.Close()
				t.Fatal("damaged data dir opened")
			}
			if !errors.Is(err, ledger.ErrStoreCorrupt) {
				t.Fatalf("err %v, want ledger.ErrStoreCorrupt", err)
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range []string{c.want, dir, "restore the data dir from a backup", "rejoin as a new member"} {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
	t.Run("control: the undamaged copy opens", func(t *testing.T) {
		st, err := OpenStore(copyDir(t, good), StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	})
	t.Run("one bad meta page: bbolt falls back to the other", func(t *testing.T) {
		dir := copyDir(t, good)
		editFile(t, filepath.Join(dir, "raft.db"), func(b []byte) []byte { ord.PutUint32(meta(b, 0), 0); return b })
		st, err := OpenStore(dir, StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	})
}

// TestOpenStoreGarbagePages overwrites each page of raft.db in turn (and
// some pages' headers only) with random bytes: OpenStore either refuses
// with ledger.ErrStoreCorrupt or opens a store whose whole log reads back, and
// never panics or faults.
func TestOpenStoreGarbagePages(t *testing.T) {
	good := goodDataDir(t)
	orig, err := os.ReadFile(filepath.Join(good, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	rng := rand.New(rand.NewPCG(1, 2))
	dir := copyDir(t, good)
	path := filepath.Join(dir, "raft.db")
	refused := 0
	for page := 2; page < len(orig)/ps; page++ {
		for _, n := range []int{ps, 16, 64} { // whole page, header, header and first elements
			b := append([]byte(nil), orig...)
			for i := range n {
				b[page*ps+i] = byte(rng.Uint32())
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := OpenStore(dir, StoreOptions{})
			if err != nil {
				if !errors.Is(err, ledger.ErrStoreCorrupt) {
					t.Fatalf("page %d (%d bytes): %v, want ledger.ErrStoreCorrupt", page, n, err)
				}
				refused++
				continue
			}
			st.Close()
		}
	}
	t.Logf("%d pages, %d damaged copies refused", len(orig)/ps, refused)
	if refused == 0 {
		t.Fatal("no damaged page was refused")
	}
}

// TestOpenStoreLockedWhileChecked: a raft.db held by another store is
// reported as locked, not as corrupt.
func TestOpenStoreLockedWhileChecked(t *testing.T) {
	dir := goodDataDir(t)
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := OpenStore(dir, StoreOptions{LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ledger.ErrStoreLocked) {
		t.Fatalf("second open: %v, want ledger.ErrStoreLocked", err)
	}
}
