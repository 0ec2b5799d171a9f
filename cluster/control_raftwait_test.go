package cluster

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

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
		if got := leader.g.waitT.Waiting(); got != 1 {
			t.Fatalf("leader has %d replication calls waiting for the down voter, want 1", got)
		}
		failures := leader.g.waitT.Failures()

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
		if got := leader.g.waitT.Waiting(); got != 0 {
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
	failures := leader.g.waitT.Failures()
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
			return leader.g.waitT.Waiting() == 2
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
			return leader.g.waitT.Waiting() == 0
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
			return leader.g.waitT.Waiting() == 1
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := leader.g.RemoveServer(ctx, victim); err != nil {
			t.Fatalf("remove %s: %v", victim, err)
		}
		waitFor(t, time.Second, "the wait for the removed "+victim+" to end", func() bool {
			return leader.g.waitT.Waiting() == 0
		})

		h.stop("n4")
		waitFor(t, 5*time.Second, "replication waiting for n4", func() bool {
			return leader.g.waitT.Waiting() == 1
		})
		start := time.Now()
		h.stop(leader.id)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("leader Close took %v with replication waiting", d)
		}
	})
}
