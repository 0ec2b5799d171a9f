//go:build !wasip1

package raftstore

import (
	"github.com/tenurehq/tenure/ledger"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// OpenStore opens (creating if needed) the raft stores in dir:
// <dir>/raft.db (raft-boltdb/v2, fsync on, bbolt with a hashmap freelist
// that is not synced to disk) and <dir>/snapshots. A data dir held by
// another process fails with ledger.ErrStoreLocked, unreadable files with
// ledger.ErrStoreCorrupt.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.LogCacheSize <= 0 {
		opts.LogCacheSize = DefaultLogCacheSize
	}
	if opts.SnapshotRetain <= 0 {
		opts.SnapshotRetain = DefaultSnapshotRetain
	}
	if opts.SnapshotLog == nil {
		opts.SnapshotLog = io.Discard
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: create data dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	// bbolt trusts its file (see boltcheck.go): check it with plain reads
	// before bbolt maps it.
	if err := checkBoltPath(path, opts); err != nil {
		return nil, err
	}
	bolt, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	if err := checkLog(bolt); err != nil {
		bolt.Close()
		return nil, fmt.Errorf("%w: %s: %v; %s", ledger.ErrStoreCorrupt, path, err, damagedAdvice)
	}
	cache, err := raft.NewLogCache(opts.LogCacheSize, bolt)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("ledger: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, opts.SnapshotRetain, opts.SnapshotLog)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("%w: snapshot store in %s: %v", ledger.ErrStoreCorrupt, dir, err)
	}
	if err := checkSnapshots(filepath.Join(dir, "snapshots"), bolt); err != nil {
		bolt.Close()
		return nil, err
	}
	return &Store{Log: cache, Stable: bolt, Snapshots: snaps, bolt: bolt}, nil
}

// openBolt opens the checked bolt file. A panic or memory fault inside
// bbolt (a corruption checkBoltFile missed) becomes ledger.ErrStoreCorrupt.
func openBolt(path string, opts StoreOptions) (st *raftboltdb.BoltStore, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			st, err = nil, fmt.Errorf("%w: %s: bbolt failed reading it: %v; %s", ledger.ErrStoreCorrupt, path, p, damagedAdvice)
		}
	}()
	st, err = raftboltdb.New(raftboltdb.Options{
		Path: path,
		BoltOptions: &bbolt.Options{
			Timeout:        opts.LockTimeout,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
		NoSync: opts.NoSync,
	})
	if err != nil {
		switch {
		case errors.Is(err, bolterrors.ErrTimeout):
			return nil, fmt.Errorf("%w: %s is held by another process (waited %v)", ledger.ErrStoreLocked, path, opts.LockTimeout)
		case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch),
			errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrInvalidMapping):
			return nil, fmt.Errorf("%w: %s: %v; %s", ledger.ErrStoreCorrupt, path, err, damagedAdvice)
		}
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}
	return st, nil
}

// checkLog reads the stable store's keys and decodes every log entry, so
// that a damaged entry is found now and not by raft's apply goroutine
// (which panics on a log it cannot read). The log must be contiguous.
func checkLog(st *raftboltdb.BoltStore) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading the log panicked: %v", p)
		}
	}()
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		if _, err := st.GetUint64([]byte(k)); err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return fmt.Errorf("stable store key %s: %w", k, err)
		}
	}
	first, err := st.FirstIndex()
	if err != nil {
		return fmt.Errorf("first log index: %w", err)
	}
	last, err := st.LastIndex()
	if err != nil {
		return fmt.Errorf("last log index: %w", err)
	}
	if first > last {
		return fmt.Errorf("first log index %d above last %d", first, last)
	}
	if first == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := st.GetLog(i, &l); err != nil {
			return fmt.Errorf("log entry %d (of %d..%d): %w", i, first, last, err)
		}
		if l.Index != i {
			return fmt.Errorf("log entry %d holds index %d", i, l.Index)
		}
	}
	return nil
}

// snapshotMeta is what raft's FileSnapshotStore writes to meta.json.
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// checkSnapshots validates every snapshot raft would consider (each
// directory in dir but in-progress ".tmp" ones): meta.json decodes, and
// state.bin has the recorded size and CRC-64. raft skips a snapshot whose
// meta it cannot read and falls back to an older one, which can be older
// than the log's first entry; so any damaged snapshot is refused, and so
// is a log that starts after the newest snapshot (raft would panic looking
// for the entries in between).
func checkSnapshots(dir string, log raft.LogStore) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: snapshot %s; %s", ledger.ErrStoreCorrupt, fmt.Sprintf(format, a...), damagedAdvice)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ledger: read snapshot dir: %w", err)
	}
	var newest uint64
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(path, "meta.json"))
		if err != nil {
			return bad("%s: %v", path, err)
		}
		var m snapshotMeta
		if err := json.Unmarshal(b, &m); err != nil {
			return bad("%s: meta.json: %v", path, err)
		}
		if m.ID != e.Name() || len(m.CRC) != 8 || m.Index == 0 {
			return bad("%s: meta.json does not describe this snapshot (id %q, index %d, %d-byte CRC)", path, m.ID, m.Index, len(m.CRC))
		}
		f, err := os.Open(filepath.Join(path, "state.bin"))
		if err != nil {
			return bad("%s: %v", path, err)
		}
		h := crc64.New(crc64.MakeTable(crc64.ECMA))
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return bad("%s: state.bin: %v", path, err)
		}
		if n != m.Size {
			return bad("%s: state.bin holds %d bytes, meta.json says %d (truncated?)", path, n, m.Size)
		}
		if !bytes.Equal(h.Sum(nil), m.CRC) {
			return bad("%s: state.bin fails its CRC-64 check", path)
		}
		newest = max(newest, m.Index)
	}
	first, err := log.FirstIndex()
	if err != nil {
		return fmt.Errorf("ledger: first log index: %w", err)
	}
	if first > 1 && newest+1 < first {
		if newest == 0 {
			return fmt.Errorf("%w: %s: the log starts at entry %d and there is no snapshot of the entries before it (snapshots lost?); %s", ledger.ErrStoreCorrupt, dir, first, damagedAdvice)
		}
		return fmt.Errorf("%w: %s: the log starts at entry %d but the newest snapshot ends at %d; %s", ledger.ErrStoreCorrupt, dir, first, newest, damagedAdvice)
	}
	return nil
}
