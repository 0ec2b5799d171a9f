package cluster

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// blockingFSM blocks every Apply until release is closed.
type blockingFSM struct {
	entered chan struct{}
	release chan struct{}
}

func (f *blockingFSM) Apply(*raft.Log) any {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-f.release
	return nil
}
func (f *blockingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (f *blockingFSM) Restore(io.ReadCloser) error         { return errors.New("no snapshots") }

// TestArmFuture: a future stuck behind a blocked FSM returns
// ErrRaftShutdown once its stop channel closes (the waiter raft itself
// would leave blocked, hashicorp/raft#498), and every future kind this
// package waits on has the field armFuture sets.
func TestArmFuture(t *testing.T) {
	conf := raft.DefaultConfig()
	conf.LocalID = "a"
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.LogOutput = io.Discard
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("a")
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{
		Servers: []raft.Server{{ID: "a", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	fsm := &blockingFSM{entered: make(chan struct{}, 1), release: make(chan struct{})}
	r, err := raft.NewRaft(conf, fsm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Shutdown().Error() }()
	released := false
	defer func() {
		if !released {
			close(fsm.release)
		}
	}()
	deadline := time.After(10 * time.Second)
	for r.State() != raft.Leader {
		select {
		case <-deadline:
			t.Fatal("no leader within 10s")
		case <-r.LeaderCh():
		case <-time.After(10 * time.Millisecond):
		}
	}
	for name, f := range map[string]raft.Future{
		"config":   r.GetConfiguration(),
		"verify":   r.VerifyLeader(),
		"nonvoter": r.AddNonvoter("b", "b", 0, time.Second),
	} {
		if !armFuture(f, make(chan struct{})) {
			t.Errorf("%s future has no settable ShutdownCh: armFuture no longer unblocks it", name)
		}
	}
	first := r.Apply([]byte("x"), time.Second)
	select {
	case <-fsm.entered:
	case <-deadline:
		t.Fatal("FSM never saw the first entry")
	}
	stuck := r.Barrier(time.Second)
	stop := make(chan struct{})
	if !armFuture(stuck, stop) {
		t.Fatal("barrier future has no settable ShutdownCh")
	}
	if armFuture(stuck, stop) {
		t.Error("armFuture re-armed an armed future")
	}
	got := make(chan error, 1)
	go func() { got <- stuck.Error() }()
	close(stop)
	select {
	case err := <-got:
		if !errors.Is(err, raft.ErrRaftShutdown) {
			t.Errorf("stuck future: %v, want ErrRaftShutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("armed future still blocked 10s after stop closed")
	}
	close(fsm.release)
	released = true
	_ = first.Error()
	sf := r.Shutdown()
	if armFuture(sf, stop) {
		t.Error("armFuture armed a shutdown future")
	}
	_ = sf.Error()
}
