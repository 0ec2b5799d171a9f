//go:build !wasip1

package ledger

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// OpenStore opens (creating if needed) the raft stores in dir:
// <dir>/raft.db (raft-boltdb/v2, fsync on, bbolt with a hashmap freelist
// that is not synced to disk) and <dir>/snapshots. A data dir held by
// another process fails with ErrStoreLocked, unreadable files with
// ErrStoreCorrupt.
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
	bolt, err := raftboltdb.New(raftboltdb.Options{
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
			return nil, fmt.Errorf("%w: %s is held by another process (waited %v)", ErrStoreLocked, path, opts.LockTimeout)
		case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch),
			errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrInvalidMapping):
			return nil, fmt.Errorf("%w: %s: %v", ErrStoreCorrupt, path, err)
		}
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}
	cache, err := raft.NewLogCache(opts.LogCacheSize, bolt)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("ledger: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, opts.SnapshotRetain, opts.SnapshotLog)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("%w: snapshot store in %s: %v", ErrStoreCorrupt, dir, err)
	}
	return &Store{Log: cache, Stable: bolt, Snapshots: snaps, bolt: bolt}, nil
}
