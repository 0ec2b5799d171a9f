package raftnet

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// replicationReq is an AppendEntries that is log replication, not a
// heartbeat.
func replicationReq() *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 5, PrevLogTerm: 3, LeaderCommitIndex: 5}
}

func TestWaitingTransport(t *testing.T) {
	const a, b = "10.0.0.1:1", "10.0.0.2:1"
	log := slog.New(slog.DiscardHandler)
	call := func(w *WaitingTransport, req *raft.AppendEntriesRequest) (time.Duration, *raft.AppendEntriesResponse, error) {
		start := time.Now()
		var resp raft.AppendEntriesResponse
		err := w.AppendEntries("b", b, req, &resp)
		return time.Since(start), &resp, err
	}

	t.Run("heartbeat fails at once, replication waits for the peer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(1)
			w := NewWaitingTransport(n.Transport(a), log, WaitProbe, WaitMax)
			defer w.Close()
			if d, _, err := call(w, &raft.AppendEntriesRequest{Term: 3}); err == nil || d != 0 {
				t.Fatalf("heartbeat to an absent peer: %v after %v, want an error at once", err, d)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				time.Sleep(30 * time.Second) // the peer's outage
				echo(n.Transport(b), stop)
			}()
			d, resp, err := call(w, replicationReq())
			if err != nil || resp.Term != 7 {
				t.Fatalf("replication across a 30s outage: %v, resp %+v", err, resp)
			}
			if d < 30*time.Second || d > 30*time.Second+WaitProbe {
				t.Fatalf("replication answered after %v, want within %v of the peer's return at 30s", d, WaitProbe)
			}
			if got := w.waiting.Load(); got != 0 {
				t.Fatalf("%d calls still waiting", got)
			}
		})
	})

	t.Run("an error from a reached peer goes to raft at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(1)
			w := NewWaitingTransport(n.Transport(a), log, WaitProbe, WaitMax)
			defer w.Close()
			peer := n.Transport(b)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for {
					select {
					case rpc := <-peer.Consumer():
						rpc.Respond(nil, errors.New("rejected"))
					case <-stop:
						return
					}
				}
			}()
			if d, _, err := call(w, replicationReq()); err == nil || !strings.Contains(err.Error(), "rejected") || d != 0 {
				t.Fatalf("got %v after %v, want the peer's error at once", err, d)
			}
			if got := w.failures.Load(); got != 1 {
				t.Fatalf("failures = %d, want 1", got)
			}
		})
	})

	t.Run("wait ends when replication is no longer wanted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(1)
			w := NewWaitingTransport(n.Transport(a), log, WaitProbe, WaitMax)
			defer w.Close()
			var unwanted atomic.Bool
			w.SetWanted(func(id raft.ServerID, addr raft.ServerAddress, term uint64) bool {
				if id != "b" || addr != b || term != 3 {
					t.Errorf("wanted(%q, %q, %d): want b, %s, 3", id, addr, term, b)
				}
				return !unwanted.Load()
			})
			go func() {
				time.Sleep(time.Second)
				unwanted.Store(true)
			}()
			if d, _, err := call(w, replicationReq()); err == nil || d > time.Second+WaitProbe {
				t.Fatalf("got %v after %v, want the error within %v of wanted turning false at 1s", err, d, WaitProbe)
			}
		})
	})

	t.Run("close ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(1)
			w := NewWaitingTransport(n.Transport(a), log, WaitProbe, WaitMax)
			go func() {
				time.Sleep(time.Second)
				_ = w.Close()
			}()
			if d, _, err := call(w, replicationReq()); err == nil || d != time.Second {
				t.Fatalf("got %v after %v, want the error when the transport closes at 1s", err, d)
			}
		})
	})

	t.Run("the wait is bounded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(1)
			w := NewWaitingTransport(n.Transport(a), log, WaitProbe, 2*time.Second)
			defer w.Close()
			if d, _, err := call(w, replicationReq()); err == nil || d < 2*time.Second || d > 2*time.Second+WaitProbe {
				t.Fatalf("got %v after %v, want the error after the 2s bound", err, d)
			}
		})
	})

	t.Run("pre-vote follows the inner transport", func(t *testing.T) {
		n := NewMemNetwork(1)
		w := NewWaitingTransport(n.Transport(a), log, WaitProbe, WaitMax)
		defer w.Close()
		if _, ok := w.RaftTransport().(raft.WithPreVote); !ok {
			t.Fatal("pre-vote lost over a transport that has it")
		}
		_, inmem := raft.NewInmemTransport("x")
		w2 := NewWaitingTransport(struct{ raft.Transport }{inmem}, log, WaitProbe, WaitMax)
		if _, ok := w2.RaftTransport().(raft.WithPreVote); ok {
			t.Fatal("pre-vote claimed over a transport without it")
		}
	})
}
