package cluster

import (
	"context"
	"errors"
	"fmt"
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
	call := func(w *waitingTransport, req *raft.AppendEntriesRequest) (time.Duration, *raft.AppendEntriesResponse, error) {
		start := time.Now()
		var resp raft.AppendEntriesResponse
		err := w.AppendEntries("b", b, req, &resp)
		return time.Since(start), &resp, err
	}

	t.Run("heartbeat fails at once, replication waits for the peer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewRaftMemNetwork(1)
			w := newWaitingTransport(n.Transport(a), log, waitProbe, waitMax)
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
			if d < 30*time.Second || d > 30*time.Second+waitProbe {
				t.Fatalf("replication answered after %v, want within %v of the peer's return at 30s", d, waitProbe)
			}
			if got := w.waiting.Load(); got != 0 {
				t.Fatalf("%d calls still waiting", got)
			}
		})
	})

	t.Run("an error from a reached peer goes to raft at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewRaftMemNetwork(1)
			w := newWaitingTransport(n.Transport(a), log, waitProbe, waitMax)
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
			n := NewRaftMemNetwork(1)
			w := newWaitingTransport(n.Transport(a), log, waitProbe, waitMax)
			defer w.Close()
			var unwanted atomic.Bool
			w.setWanted(func(id raft.ServerID, addr raft.ServerAddress, term uint64) bool {
				if id != "b" || addr != b || term != 3 {
					t.Errorf("wanted(%q, %q, %d): want b, %s, 3", id, addr, term, b)
				}
				return !unwanted.Load()
			})
			go func() {
				time.Sleep(time.Second)
				unwanted.Store(true)
			}()
			if d, _, err := call(w, replicationReq()); err == nil || d > time.Second+waitProbe {
				t.Fatalf("got %v after %v, want the error within %v of wanted turning false at 1s", err, d, waitProbe)
			}
		})
	})

	t.Run("close ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := NewRaftMemNetwork(1)
			w := newWaitingTransport(n.Transport(a), log, waitProbe, waitMax)
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
			n := NewRaftMemNetwork(1)
			w := newWaitingTransport(n.Transport(a), log, waitProbe, 2*time.Second)
			defer w.Close()
			if d, _, err := call(w, replicationReq()); err == nil || d < 2*time.Second || d > 2*time.Second+waitProbe {
				t.Fatalf("got %v after %v, want the error after the 2s bound", err, d)
			}
		})
	})

	t.Run("pre-vote follows the inner transport", func(t *testing.T) {
		n := NewRaftMemNetwork(1)
		w := newWaitingTransport(n.Transport(a), log, waitProbe, waitMax)
		defer w.Close()
		if _, ok := w.raftTransport().(raft.WithPreVote); !ok {
			t.Fatal("pre-vote lost over a transport that has it")
		}
		_, inmem := raft.NewInmemTransport("x")
		w2 := newWaitingTransport(struct{ raft.Transport }{inmem}, log, waitProbe, waitMax)
		if _, ok := w2.raftTransport().(raft.WithPreVote); ok {
			t.Fatal("pre-vote claimed over a transport without it")
		}
	})
}

// A voter down for 30 s (virtual) is replicated to again as soon as it is
// back: raft's leader does not sleep out a backoff grown during the outage.
// Raft's failure count for the voter stays at zero (without the wait it
// reaches its cap of 12, a 10.24 s backoff, within 21 s).
func TestControlVoterReturnsAfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 15)
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V")
		leader := h.waitLeader(10 * time.Second)
		victim := "n1"
		if leader.id == victim {
			victim = "n2"
		}
		var want []string
		h.apply(leader, "before", 5*time.Second)
		want = append(want, "before")
		h.waitApplied(5*time.Second, want)

		h.stop(victim)
		downAt := time.Now()
		for i := 0; time.Since(downAt) < 30*time.Second; i++ {
			cmd := fmt.Sprintf("down%d", i)
			h.apply(leader, cmd, 5*time.Second)
			want = append(want, cmd)
			time.Sleep(time.Second)
		}
		if got := leader.g.waitT.waiting.Load(); got != 1 {
			t.Fatalf("leader has %d replication calls waiting for the down voter, want 1", got)
		}
		failures := leader.g.waitT.failures.Load()

		back := time.Now()
		h.start(victim)
		h.waitApplied(10*time.Second, want)
		// Raft's heartbeat to the returning voter is capped at
		// HeartbeatTimeout/2 (150 ms here); the entries follow within
		// waitProbe of its transport answering.
		t.Logf("caught up %v after restart; raft counted %d replication failures during the outage", time.Since(back), failures)
		if d := time.Since(back); d > 100*time.Millisecond {
			t.Errorf("returning voter caught up %v after its restart, want ≤ 100ms", d)
		}
		if failures != 0 {
			t.Errorf("raft counted %d failed replication calls over the 30s outage, want 0", failures)
		}
		if got := leader.g.waitT.waiting.Load(); got != 0 {
			t.Errorf("%d replication calls still waiting after the voter returned", got)
		}
	})
}

// The same over loopback TCP (raft's NetworkTransport, bolt stores): a
// voter down for 3 s and restarted on its address is caught up at once.
// Raft may count a failure per stale pooled connection to the killed
// process (the peer may have been reached: not waited on), then none;
// without the wait it counts one per backoff step, about ten in 3 s, and
// sleeps up to 2.56 s after the voter is back (measured: 10, caught up
// after 2.1 s; with the wait: 0, 35 ms).
func TestControlVoterReturnsAfterOutageTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	h := newTCPHarness(t)
	h.cfg = func(c *ControlConfig) {
		if n := h.nodes[c.NodeID]; n != nil && n.addr != "" {
			c.BindAddr = n.addr // restart on the same address
		}
	}
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(20*time.Second, "n1:V n2:V n3:V")
	leader := h.waitLeader(20 * time.Second)
	victim := "n1"
	if leader.id == victim {
		victim = "n2"
	}
	want := []string{"before"}
	h.apply(leader, "before", 10*time.Second)
	h.waitApplied(10*time.Second, want)

	h.stop(victim)
	downAt := time.Now()
	for i := 0; time.Since(downAt) < 3*time.Second; i++ {
		cmd := fmt.Sprintf("down%d", i)
		h.apply(leader, cmd, 10*time.Second)
		want = append(want, cmd)
		time.Sleep(200 * time.Millisecond) // pacing entries through the outage, not waiting for a state
	}
	failures := leader.g.waitT.failures.Load()
	back := time.Now()
	h.start(victim)
	h.waitApplied(10*time.Second, want)
	d := time.Since(back)
	t.Logf("caught up %v after restart; raft counted %d replication failures during the outage", d, failures)
	if failures > 4 {
		t.Errorf("raft counted %d failed replication calls over a 3s outage, want ≤ 4 (stale pooled connections)", failures)
	}
	if d > time.Second {
		t.Errorf("returning voter caught up %v after its restart, want ≤ 1s", d)
	}
}

// A call blocked waiting for a dead follower is no contact: with both
// followers of three voters down, the leader's replication waits for both,
// yet VerifyLeader fails and the leader steps down within its leader lease,
// as it did when those calls failed at once.
func TestControlWaitIsNoContact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 17)
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V")
		leader := h.waitLeader(10 * time.Second)
		for _, n := range h.running() {
			if n != leader {
				h.stop(n.id)
			}
		}
		start := time.Now()
		waitFor(t, 100*time.Millisecond, "replication waiting for both followers", func() bool {
			return leader.g.waitT.waiting.Load() == 2
		})
		if err := leader.g.rft().VerifyLeader().Error(); err == nil {
			t.Fatal("VerifyLeader succeeded with both followers down")
		}
		waitFor(t, 5*time.Second, "the leader to step down", func() bool {
			return !leader.g.IsLeader()
		})
		// LeaderLeaseTimeout is 150 ms here; the lease check runs at most
		// that often.
		d := time.Since(start)
		t.Logf("leader stepped down %v after losing both followers", d)
		if d > time.Second {
			t.Errorf("leader stepped down %v after losing both followers, want within 1s", d)
		}
		waitFor(t, time.Second, "the waits to end with leadership", func() bool {
			return leader.g.waitT.waiting.Load() == 0
		})
	})
}

// A wait for a down peer ends when the peer is removed from the
// configuration, and when the leader closes: Close does not hang on it, and
// no goroutine outlives the group (synctest fails the test if one does).
func TestControlWaitEndsOnRemoveAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 16)
		defer h.closeAll()
		for i := 1; i <= 4; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		leader := h.waitLeader(10 * time.Second)
		victim := "n1"
		if leader.id == victim {
			victim = "n2"
		}
		h.stop(victim)
		waitFor(t, 5*time.Second, "replication waiting for "+victim, func() bool {
			return leader.g.waitT.waiting.Load() == 1
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := leader.g.RemoveServer(ctx, victim); err != nil {
			t.Fatalf("remove %s: %v", victim, err)
		}
		waitFor(t, time.Second, "the wait for the removed "+victim+" to end", func() bool {
			return leader.g.waitT.waiting.Load() == 0
		})

		h.stop("n4")
		waitFor(t, 5*time.Second, "replication waiting for n4", func() bool {
			return leader.g.waitT.waiting.Load() == 1
		})
		start := time.Now()
		h.stop(leader.id)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("leader Close took %v with replication waiting", d)
		}
	})
}
