//go:build unix && !wasip1

package raftstore

import (
	"errors"
	"os"
	"syscall"
	"time"
)

var errLockTimeout = errors.New("lock timeout")

// lockShared takes a shared flock on f (released when f is closed),
// waiting up to timeout for a writer's exclusive lock to go. bbolt takes
// the same kind of lock, so a file another process has open for writing
// is not read while it changes.
func lockShared(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return errLockTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
}
