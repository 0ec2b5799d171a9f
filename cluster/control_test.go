package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// runLifecycle is the control-group story both transports must pass: five
// nodes with bootstrap-expect 3 form one cluster (3 voters, 2 non-voters) and
// apply the same entries; a voter restarts from its stores and catches up; a
// voter leaves gracefully and a non-voter is promoted; the leader is killed,
// another is elected, a follower's Apply is forwarded to it, and the dead
// leader stays in the configuration (a dead hint never removes a voter).
func runLifecycle(t *testing.T, h *harness, wait time.Duration) {
	defer h.closeAll()
	for i := 1; i <= 5; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(wait, "n1:V n2:V n3:V n4:N n5:N")
	// Exactly one cluster: every node holds the same configuration.
	waitAllConfig(t, h, wait, "n1:V n2:V n3:V n4:N n5:N")
	var want []string
	for i := range 10 {
		n := h.running()[i%5]
		cmd := fmt.Sprintf("a%d", i)
		h.apply(n, cmd, wait)
		want = append(want, cmd)
	}
	h.waitApplied(wait, want)
	for _, n := range h.running() {
		waitFor(t, wait, n.id+" sees voters n1..n3", func() bool {
			return slices.Equal(n.g.Voters(), []string{"n1", "n2", "n3"})
		})
	}

	// A voter that is not the leader restarts from its stores.
	leader := h.waitLeader(wait)
	var voter string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != leader.id {
			voter = id
			break
		}
	}
	h.stop(voter)
	for i := range 5 {
		cmd := fmt.Sprintf("b%d", i)
		h.apply(h.nodes["n5"], cmd, wait) // a non-voter: forwarded
		want = append(want, cmd)
	}
	h.start(voter)
	h.waitApplied(wait, want)
	h.waitConfig(wait, "n1:V n2:V n3:V n4:N n5:N")

	// A voter that is not the leader leaves gracefully: n4 is promoted.
	leader = h.waitLeader(wait)
	var leaving string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != leader.id {
			leaving = id
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	if err := h.nodes[leaving].g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown %s: %v", leaving, err)
	}
	cancel()
	h.nodes[leaving].g = nil
	h.gossip.state(leaving, gossip.StateLeft, gossip.EventLeave)
	var voters []string
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		if id != leaving {
			voters = append(voters, id)
		}
	}
	wantCfg := func() string {
		var parts []string
		for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
			switch {
			case slices.Contains(voters, id):
				parts = append(parts, id+":V")
			case id == "n5":
				parts = append(parts, id+":N")
			}
		}
		return strings.Join(parts, " ")
	}
	h.waitConfig(wait, wantCfg())
	// Every node, not only the leader, must hold the new configuration
	// before the leader dies: the leader commits it with a majority of the
	// new voters, and a remaining voter still on the old one refuses the
	// promoted node's (pre-)vote as "not a voter" (hashicorp/raft), so with
	// the leader gone neither could win an election.
	waitAllConfig(t, h, wait, wantCfg())

	// The leader dies (no leave): another voter takes over; a follower's
	// Apply is forwarded; the dead leader stays a voter.
	leader = h.waitLeader(wait)
	dead := leader.id
	h.stop(dead)
	h.gossip.state(dead, StateDead, gossip.EventFailed)
	newLeader := h.waitLeader(wait)
	if newLeader.id == dead {
		t.Fatalf("dead node %s still leader", dead)
	}
	var follower *testNode
	for _, n := range h.running() {
		if n != newLeader {
			follower = n
			break
		}
	}
	for i := range 5 {
		cmd := fmt.Sprintf("c%d", i)
		h.apply(follower, cmd, wait)
		want = append(want, cmd)
	}
	h.waitApplied(wait, want)
	h.waitConfig(wait, wantCfg())
}

// waitAllConfig waits until every running node's latest configuration is
// want (waitConfig checks the leader's only).
func waitAllConfig(t *testing.T, h *harness, wait time.Duration, want string) {
	t.Helper()
	for _, n := range h.running() {
		waitFor(t, wait, n.id+" has configuration "+want, func() bool {
			s, err := n.g.Servers()
			return err == nil && configString(s) == want
		})
	}
}

func TestControlLifecycleSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 1)
		runLifecycle(t, h, 30*time.Second)
	})
}

func TestControlLifecycleTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	h := newTCPHarness(t)
	runLifecycle(t, h, 30*time.Second)
}

// A gossip "dead" hint, however long, never removes a voter when
// DeadVoterTimeout is 0; with a timeout, the dead voter is replaced by a
// caught-up non-voter (promote first, then remove).
func TestControlDeadVoter(t *testing.T) {
	for _, timeout := range []time.Duration{0, 20 * time.Second} {
		t.Run(fmt.Sprint("timeout=", timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newMemHarness(t, 2)
				h.cfg = func(c *ControlConfig) { c.DeadVoterTimeout = timeout }
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
				h.gossip.state(victim, StateDead, gossip.EventFailed)
				var replaced []string
				for _, id := range []string{"n1", "n2", "n3", "n4"} {
					if id != victim {
						replaced = append(replaced, id+":V")
					}
				}
				if timeout == 0 {
					// A minute of virtual time, reconciling every 500ms:
					// the dead voter stays.
					time.Sleep(time.Minute)
					h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
					return
				}
				// Before the timeout nothing changes; after it, the
				// non-voter is promoted and the dead voter removed.
				time.Sleep(timeout / 2)
				h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
				h.waitConfig(2*time.Minute, strings.Join(replaced, " "))
			})
		})
	}
}

// A node that disappears for good is replaced at the same address by a node
// with a new id: the old entry is removed and the new one added.
func TestControlAddressReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 3)
		defer h.closeAll()
		for i := 1; i <= 4; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		old := h.nodes["n4"]
		h.stop("n4")
		h.gossip.forget("n4")
		// A new identity (fresh stores) on the same address.
		h.startAt("n9", old.addr)
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n9:N")
	})
}

// Leadership events: Leader=true arrives only once leadership is established
// (after the Barrier), and the FSM has then applied everything committed
// before the term; losing leadership sends Leader=false.
func TestControlLeadershipEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 4)
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		leader := h.waitLeader(10 * time.Second)
		select {
		case ev := <-leader.g.Leadership():
			if !ev.Leader || ev.Term != leader.g.Term() {
				t.Fatalf("event %+v, term %d", ev, leader.g.Term())
			}
			if leader.g.AppliedIndex() < 1 {
				t.Fatalf("applied index %d after establish", leader.g.AppliedIndex())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no leadership event")
		}
		// Cut the leader off: it steps down and says so.
		h.mem.Isolate(leader.addr)
		select {
		case ev := <-leader.g.Leadership():
			if ev.Leader {
				t.Fatalf("want Leader=false, got %+v", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no step-down event")
		}
		h.mem.Heal()
		h.waitLeader(10 * time.Second)
	})
}

// Apply on a node with no reachable leader fails with ErrNoLeader within its
// deadline; the command was never submitted.
func TestControlApplyNoLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 5)
		h.cfg = func(c *ControlConfig) { c.BootstrapExpect = 3 }
		defer h.closeAll()
		n := h.start("n1") // alone: never bootstraps
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := n.g.Apply(ctx, []byte("x"))
		if !errors.Is(err, ErrNoLeader) {
			t.Fatalf("err = %v, want ErrNoLeader", err)
		}
	})
}

// An FSM error response crosses the RPC as *FSMError with its message; a
// BinaryMarshaler response as its bytes; an unsupported response type is
// reported as ErrBadResponse (the command is committed).
func TestControlFSMErrorForwarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 6)
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		leader := h.waitLeader(10 * time.Second)
		for _, n := range h.running() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := n.g.Apply(ctx, []byte("fail"))
			cancel()
			var fe *FSMError
			if !errors.As(err, &fe) || fe.Err.Error() != "boom" || res.Index == 0 || fe.Index != res.Index {
				t.Fatalf("via %s (leader %s): res %+v err %v", n.id, leader.id, res, err)
			}
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			res, err = n.g.Apply(ctx, []byte("marshaler"))
			cancel()
			if err != nil || string(res.Response) != "m!" {
				t.Fatalf("marshaler via %s: res %+v err %v", n.id, res, err)
			}
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			res, err = n.g.Apply(ctx, []byte("int"))
			cancel()
			if !errors.Is(err, ErrBadResponse) || res.Index == 0 {
				t.Fatalf("int via %s: res %+v err %v", n.id, res, err)
			}
		}
	})
}

// A node that joins after formation never bootstraps a second cluster, even
// when its id sorts first: it finds peers with state and becomes a
// non-voter.
func TestControlLateJoinerLowestID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 7)
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V")
		h.apply(h.nodes["n2"], "x", 10*time.Second)
		h.start("a0")
		h.waitConfig(10*time.Second, "a0:N n1:V n2:V n3:V")
		h.waitApplied(10*time.Second, []string{"x"})
		if l := h.nodes["a0"]; l.g.IsLeader() {
			t.Fatal("late joiner leads")
		}
	})
}

// Operator removal: a voter is replaced by a caught-up non-voter; without
// one, a removal that would leave fewer voters than a quorum is refused. The
// leader can leave gracefully too.
func TestControlOperatorRemoveAndLeaderLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 8)
		defer h.closeAll()
		for i := 1; i <= 4; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		leader := h.waitLeader(10 * time.Second)
		follower := h.nodes["n4"]
		var victim string
		for _, id := range []string{"n1", "n2", "n3"} {
			if id != leader.id {
				victim = id
				break
			}
		}
		h.stop(victim)
		h.gossip.state(victim, StateDead, gossip.EventFailed)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := follower.g.RemoveServer(ctx, victim); err != nil { // forwarded
			t.Fatalf("remove %s: %v", victim, err)
		}
		var want []string
		for _, id := range []string{"n1", "n2", "n3", "n4"} {
			if id != victim {
				want = append(want, id+":V")
			}
		}
		h.waitConfig(10*time.Second, strings.Join(want, " "))
		if err := follower.g.RemoveServer(ctx, "nobody"); !errors.Is(err, ErrUnknownServer) {
			t.Fatalf("remove unknown: %v", err)
		}

		// The leader leaves; the two others keep committing.
		leader = h.waitLeader(10 * time.Second)
		if err := leader.g.Shutdown(ctx); err != nil {
			t.Fatalf("leader shutdown: %v", err)
		}
		leader.g = nil
		h.gossip.state(leader.id, gossip.StateLeft, gossip.EventLeave)
		next := h.waitLeader(10 * time.Second)
		h.apply(next, "after-leave", 10*time.Second)
		servers, err := next.g.Servers()
		if err != nil {
			t.Fatal(err)
		}
		if len(servers) != 2 || containsServer(servers, leader.id) {
			t.Fatalf("config after leader left: %s", configString(servers))
		}
		// Two voters, MaxVoters 3: removing one more leaves 1 < quorum 2.
		var other string
		for _, s := range servers {
			if s.ID != next.id {
				other = s.ID
			}
		}
		if err := next.g.RemoveServer(ctx, other); !errors.Is(err, ErrQuorumRisk) {
			t.Fatalf("remove %s: %v, want ErrQuorumRisk", other, err)
		}
	})
}

// The leader cut off from everyone (asymmetric first: it can send but not
// hear) loses leadership; a new leader commits; after healing the group
// converges on one log.
func TestControlLeaderPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 9)
		defer h.closeAll()
		for i := 1; i <= 5; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N n5:N")
		h.apply(h.nodes["n4"], "before", 10*time.Second)
		old := h.waitLeader(10 * time.Second)
		for _, n := range h.running() {
			if n != old {
				h.mem.Cut(n.addr, old.addr) // old leader hears nobody
			}
		}
		// Its in-flight Apply cannot commit: it ends with an error, never
		// a false success.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := old.g.Apply(ctx, []byte("lost?"))
		cancel()
		if err == nil {
			t.Fatal("apply on a deaf leader succeeded")
		}
		var fresh *testNode
		waitFor(t, 10*time.Second, "a new leader", func() bool {
			for _, n := range h.running() {
				if n != old && n.g.established.Load() != 0 {
					fresh = n
					return true
				}
			}
			return false
		})
		h.apply(fresh, "during", 10*time.Second)
		h.mem.Heal()
		h.apply(old, "after", 10*time.Second)
		waitFor(t, 10*time.Second, "one log everywhere", func() bool {
			want := h.nodes[fresh.id].fsm.entries()
			for _, n := range h.running() {
				if !slices.Equal(n.fsm.entries(), want) {
					return false
				}
			}
			return slices.Contains(want, "after")
		})
	})
}

// A node that joins after the log was compacted catches up through
// InstallSnapshot over the in-memory transport.
func TestControlJoinerInstallsSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 10)
		h.cfg = func(c *ControlConfig) {
			c.SnapshotThreshold = 64
			c.TrailingLogs = 16
			c.SnapshotInterval = 100 * time.Millisecond
		}
		defer h.closeAll()
		for i := 1; i <= 3; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		leader := h.waitLeader(10 * time.Second)
		var want []string
		for i := range 200 {
			cmd := fmt.Sprintf("s%d", i)
			h.apply(leader, cmd, 10*time.Second)
			want = append(want, cmd)
		}
		waitFor(t, 10*time.Second, "a snapshot on the leader", func() bool {
			snaps, err := leader.snap.List()
			return err == nil && len(snaps) > 0
		})
		h.start("n4")
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		h.waitApplied(10*time.Second, want)
	})
}

// A leader that vanishes without closing its connections (a dead host: no
// TCP reset) must not hold a follower's forwarded command until the
// command's deadline: once the follower sees another leader (or none), the
// forward ends with ErrLeadershipLost (outcome unknown) and the next
// command reaches the new leader.
func TestControlForwardAbandonsSilentLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 11)
		defer h.closeAll()
		for i := 1; i <= 5; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N n5:N")
		h.apply(h.nodes["n4"], "before", 10*time.Second)
		old := h.waitLeader(10 * time.Second)
		via := h.nodes["n4"]      // a non-voter with an open stream to the leader
		h.mem.Blackhole(old.addr) // the leader's host dies: no resets
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := via.g.Apply(ctx, []byte("during"))
		took := time.Since(start)
		if err != nil && !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("forward to a silent leader: %v, want success or ErrLeadershipLost", err)
		}
		if took > 20*time.Second {
			t.Fatalf("forward to a silent leader took %v (deadline 1m): it waited for the dead leader", took)
		}
		t.Logf("forward via %s ended after %v: %v", via.id, took, err)
		h.apply(via, "after", 20*time.Second)
	})
}

// A node restarted from its stores knows the configuration but not the
// leader until the leader's next AppendEntries reaches it (raft's heartbeat
// backoff for a peer that was down can delay that by up to
// HeartbeatTimeout/2). Its first Apply does not wait for it: it is
// forwarded to the configuration's voters (applyViaVoters), which is what a
// quick restart's registration needs (issue 15, goal 4).
func TestControlRestartedNodeAppliesViaVoters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemHarness(t, 12)
		defer h.closeAll()
		for i := 1; i <= 4; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		h.apply(h.nodes["n4"], "before", 10*time.Second)
		h.stop("n4")
		n := h.start("n4")
		if _, addr := n.g.Leader(); addr != "" {
			t.Fatalf("restarted n4 already knows leader %s: the test needs it not to", addr)
		}
		if n.g.leaderSeen.Load() {
			t.Fatal("restarted n4 counts a leader as seen")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		res, err := n.g.applyViaVoters(ctx, []byte("via-voters"))
		if err != nil {
			t.Fatalf("applyViaVoters on a restarted node: %v", err)
		}
		if res.Index == 0 {
			t.Fatal("applyViaVoters returned no index")
		}
		// Virtual time: only the forward's round trips, no waiting.
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Fatalf("applyViaVoters took %v", took)
		}
		h.waitApplied(10*time.Second, []string{"before", "via-voters"})
	})
}
