//go:build !unix && !wasip1

package raftstore

import (
	"errors"
	"os"
	"time"
)

var errLockTimeout = errors.New("lock timeout")

// lockShared is a no-op where flock is not available: the file is checked
// without a lock, and bbolt's own lock on open still keeps a second
// writer out.
func lockShared(*os.File, time.Duration) error { return nil }
