package cluster

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// hashicorp/raft tells followers that an entry committed only with a later
// AppendEntries that carries its commit index: the next entries, or the
// replication loop's idle send every CommitTimeout..2·CommitTimeout
// (heartbeats carry none). With a long CommitTimeout and nothing else
// appended, a follower applies a committed command only after that tick;
// after PushCommit it applies it at once (one Barrier round).
func TestControlPushCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const commitTick = 2 * time.Second
		h := newMemHarness(t, 1)
		h.cfg = func(c *ControlConfig) {
			c.CommitTimeout = commitTick
			c.PushCommand = []byte("push")
		}
		defer h.closeAll()
		for _, id := range []string{"n1", "n2", "n3"} {
			h.start(id)
		}
		h.waitConfig(time.Minute, "n1:V n2:V n3:V")
		leader := h.waitLeader(time.Minute)
		h.waitApplied(time.Minute, nil)
		// Let the followers learn every commit so far (the configuration
		// changes): nothing is appended afterwards but what the test applies.
		synctest.Wait()
		time.Sleep(3 * commitTick)

		// Every replica, the leader included, must apply cmd. A follower
		// whose AppendEntries left after the commit learns it with it; the
		// one whose ack made the quorum waits for the commit tick.
		var follower *testNode
		for _, n := range h.running() {
			if n != leader {
				follower = n
				break
			}
		}
		applyAndTime := func(cmd string, push bool) time.Duration {
			t0 := time.Now()
			h.apply(leader, cmd, time.Minute)
			if push {
				leader.g.PushCommit()
			}
			for _, n := range h.running() {
				waitFor(t, time.Minute, n.id+" applies "+cmd, func() bool {
					return slices.Contains(n.fsm.entries(), cmd)
				})
			}
			return time.Since(t0)
		}

		// Without a push the follower waits for the commit tick: this is
		// what makes the push worth an entry (if a raft upgrade makes
		// heartbeats carry the commit index, this fails and PushCommit can go).
		if d := applyAndTime("plain", false); d < commitTick {
			t.Fatalf("every replica applied an unpushed command after %v, before the %v commit tick: the premise of PushCommit no longer holds", d, commitTick)
		} else {
			t.Logf("unpushed: every replica applied after %v", d)
		}
		// With a push it applies the command well inside the tick.
		if d := applyAndTime("pushed", true); d >= commitTick/4 {
			t.Fatalf("every replica applied a pushed command after %v, want < %v", d, commitTick/4)
		} else {
			t.Logf("pushed: every replica applied after %v", d)
		}
		// Pushes asked for while one is in flight coalesce, and a push on a
		// follower does nothing: neither blocks.
		for range 5 {
			leader.g.PushCommit()
			follower.g.PushCommit()
		}
		if d := applyAndTime("pushed-again", true); d >= commitTick/4 {
			t.Fatalf("every replica applied the second pushed command after %v, want < %v", d, commitTick/4)
		}
		// The push appended nothing: it was the commit index alone, sent
		// at once (a follower that has every entry needs no PushCommand).
		for _, n := range h.running() {
			if slices.Contains(n.fsm.entries(), "push") {
				t.Errorf("%s's FSM applied a push command: %q; want the commit index pushed without an entry", n.id, n.fsm.entries())
			}
		}
	})
}

// A commit push carries only what the leader knows is committed: a
// follower that holds an entry the leader appended but could not commit
// (no quorum acknowledged it) must not apply it after a push. The push
// pushes the leader's commit index; pushing its last index instead would
// make the follower apply an entry a later leader may overwrite.
func TestControlPushCommitOnlyCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const commitTick = 2 * time.Second
		h := newMemHarness(t, 1)
		h.cfg = func(c *ControlConfig) {
			c.CommitTimeout = commitTick
			c.PushCommand = []byte("push")
		}
		defer h.closeAll()
		for _, id := range []string{"n1", "n2", "n3"} {
			h.start(id)
		}
		h.waitConfig(time.Minute, "n1:V n2:V n3:V")
		leader := h.waitLeader(time.Minute)
		h.waitApplied(time.Minute, nil)
		synctest.Wait()
		time.Sleep(3 * commitTick)
		var others []*testNode
		for _, n := range h.running() {
			if n != leader {
				others = append(others, n)
			}
		}
		cut, holder := others[0], others[1]
		// cut hears nothing from the leader and the leader nothing from it;
		// holder gets the leader's entries but its answers are lost: the
		// leader appends "x", holder stores it, no quorum acknowledges it.
		h.mem.Cut(leader.addr, cut.addr)
		h.mem.Cut(cut.addr, leader.addr)
		h.mem.Cut(holder.addr, leader.addr)
		before := holder.g.rft().LastIndex()
		leader.g.rft().Apply([]byte("x"), 0) // never commits while the cuts last
		waitFor(t, time.Second, holder.id+" stores the uncommitted entry", func() bool {
			return holder.g.rft().LastIndex() > before
		})
		leader.g.PushCommit()
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if leader.g.rft().State() != raft.Leader {
			t.Fatalf("%s is no longer leader: the check ran too late (its leader lease is %v)", leader.id, TestControlConfig().LeaderLeaseTimeout)
		}
		if slices.Contains(holder.fsm.entries(), "x") {
			t.Fatalf("%s applied an entry no quorum acknowledged after a commit push: %q", holder.id, holder.fsm.entries())
		}
		h.mem.Heal()
	})
}

// refusingTransport answers every AppendEntries as a follower that lacks
// the previous entry would, without sending it.
type refusingTransport struct{ raft.Transport }

func (refusingTransport) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	*resp = raft.AppendEntriesResponse{Term: args.Term, LastLog: args.PrevLogEntry - 1}
	return nil
}

// A follower that keeps refusing a commit push (it lacks the entry: it is
// behind) gets the push as an appended PushCommand instead, whose
// replication carries the commit index.
func TestControlPushCommitFallsBackToAnEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const commitTick = 2 * time.Second
		h := newMemHarness(t, 1)
		h.cfg = func(c *ControlConfig) {
			c.CommitTimeout = commitTick
			c.PushCommand = []byte("push")
		}
		defer h.closeAll()
		for _, id := range []string{"n1", "n2", "n3"} {
			h.start(id)
		}
		h.waitConfig(time.Minute, "n1:V n2:V n3:V")
		leader := h.waitLeader(time.Minute)
		h.waitApplied(time.Minute, nil)
		synctest.Wait()
		time.Sleep(3 * commitTick)
		// Set before the push is signalled: the push loop reads it after
		// receiving the signal.
		leader.g.pushTrans = refusingTransport{leader.g.pushTrans}
		t0 := time.Now()
		h.apply(leader, "late", time.Minute)
		leader.g.PushCommit()
		for _, n := range h.running() {
			waitFor(t, time.Minute, n.id+" applies late", func() bool {
				return slices.Contains(n.fsm.entries(), "late")
			})
		}
		if d := time.Since(t0); d >= commitTick/4 {
			t.Fatalf("every replica applied the command %v after it was applied on the leader, want < %v (the entry push)", d, commitTick/4)
		}
		// The leader applies the push entry once it commits; the followers
		// learn that commit only with the next commit index they get.
		waitFor(t, commitTick/4, leader.id+" applies the push command", func() bool {
			return slices.Contains(leader.fsm.entries(), "push")
		})
	})
}
