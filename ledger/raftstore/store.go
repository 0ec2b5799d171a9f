package raftstore

import (
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"
)

// StoreOptions configures OpenStore. Zero values take the defaults.
type StoreOptions struct {
	// LockTimeout is how long to wait for another process to release the
	// data dir's bolt file lock before failing with ledger.ErrStoreLocked.
	LockTimeout time.Duration
	// LogCacheSize is how many recent log entries raft.NewLogCache keeps
	// in memory.
	LogCacheSize int
	// SnapshotRetain is how many snapshots the file snapshot store keeps.
	SnapshotRetain int
	// SnapshotLog receives the file snapshot store's log lines (nil: discard).
	SnapshotLog io.Writer
	// NoSync turns fsync off. Only for tests and benchmarks of the
	// non-durable case: an acknowledged commit may be lost on power loss.
	NoSync bool
}

// Store defaults.
const (
	DefaultLockTimeout    = time.Second
	DefaultLogCacheSize   = 512
	DefaultSnapshotRetain = 2
)

// Store holds the raft stores of one data dir.
type Store struct {
	// Log is the raft log (bolt, behind an in-memory cache of recent entries).
	Log raft.LogStore
	// Stable is raft's stable store (current term, vote), in the same bolt file.
	Stable raft.StableStore
	// Snapshots is the file snapshot store in <dir>/snapshots.
	Snapshots raft.SnapshotStore

	bolt io.Closer // the bolt file; nil for stores built in memory
}

// Close closes the bolt file (releasing the data dir lock). Shut raft down
// first.
func (s *Store) Close() error {
	if s.bolt == nil {
		return nil
	}
	if err := s.bolt.Close(); err != nil {
		return fmt.Errorf("ledger: close store: %w", err)
	}
	return nil
}
