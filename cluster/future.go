package cluster

import (
	"context"
	"fmt"
	"reflect"

	"github.com/hashicorp/raft"
)

// hashicorp/raft resolves an Apply, Barrier or membership-change future only
// when its entry is applied or leadership is lost. A future whose entry sits
// in raft's FSM queue when the node shuts down is never resolved, and its
// Error blocks for ever (hashicorp/raft#498, open). Futures carry an exported
// ShutdownCh that Error also selects on, but raft sets it only on the
// futures of its own snapshot path. armFuture sets it to stop for every
// future this package waits on, so a future left behind by Close returns
// raft.ErrRaftShutdown instead of leaking its waiter.
//
// TestArmFuture fails if a raft release renames or removes the field.

var chanStructType = reflect.TypeOf((chan struct{})(nil))

// armFuture makes f's Error return raft.ErrRaftShutdown once stop is
// closed. It reports whether f has the field (shutdownFuture and
// errorFuture do not, and need not). Call it before anyone calls f.Error.
func armFuture(f raft.Future, stop chan struct{}) bool {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	v = v.Elem()
	if v.Kind() != reflect.Struct {
		return false
	}
	fv := v.FieldByName("ShutdownCh")
	if !fv.IsValid() || !fv.CanSet() || fv.Type() != chanStructType || !fv.IsNil() {
		return false
	}
	fv.Set(reflect.ValueOf(stop))
	return true
}

// wait waits for f, returning raft.ErrRaftShutdown if the group closes first.
func (g *ControlGroup) wait(f raft.Future) error {
	armFuture(f, g.closing)
	return f.Error()
}

// waitCtx waits for f, ctx or the group's closing; on ctx's end it returns
// ErrTimeout. Its helper goroutine ends when f resolves or the group closes.
func (g *ControlGroup) waitCtx(ctx context.Context, f raft.Future) error {
	select {
	case err := <-g.outcome(f):
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
}

// outcome returns a channel that gets f's error once f resolves or the
// group closes (armFuture); its goroutine ends then.
func (g *ControlGroup) outcome(f raft.Future) <-chan error {
	armFuture(f, g.closing)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	return done
}
