package node

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// replicaBytes is n's replica at its applied index, in the snapshot
// encoding.
func replicaBytes(t *testing.T, n *Node) (uint64, []byte) {
	t.Helper()
	fsm := n.be.(*netBackend).fsm
	s, err := fsm.Snapshot()
	if err != nil {
		t.Fatalf("%s: snapshot: %v", n.ID(), err)
	}
	sink := &bufSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatalf("%s: persist: %v", n.ID(), err)
	}
	// The snapshot starts with its version byte and the applied index.
	return fsm.State().AppliedIndex(), sink.Bytes()
}

type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Cancel() error { return nil }
func (*bufSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*bufSink)(nil)

// sameReplica waits until member's replica equals voter's, byte for byte,
// at the same applied index.
func sameReplica(t *testing.T, ctx context.Context, member, voter *Node) {
	t.Helper()
	var mi, vi uint64
	for ctx.Err() == nil {
		var mb, vb []byte
		mi, mb = replicaBytes(t, member)
		vi, vb = replicaBytes(t, voter)
		if mi == vi && bytes.Equal(mb, vb) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s (at %d) never equal to %s (at %d)", member.ID(), mi, voter.ID(), vi)
}

func owned2(n *Node, id string) int {
	c := 0
	for _, s := range n.Shards() {
		if s.Owner == id && s.Valid {
			c++
		}
	}
	return c
}

func raftServers(n *Node) []cluster.ServerInfo {
	s, _ := n.be.(*netBackend).ctl.(*clusterControl).g.Servers()
	return s
}

// TestMembersFollowTheStream: at cluster version 5 members (voter=never)
// are not in the Raft configuration; their replicas follow a voter's
// stream byte for byte, they own shards and are ready; when the voter a
// member follows crashes, the member resumes on another and stays equal.
func TestMembersFollowTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(settleBubble)
		tr := seededNetwork(11)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cfgs := make([]Config, 5)
		for i := range cfgs {
			cfgs[i] = memNetConfig(tr, i, 5)
			cfgs[i].BootstrapExpect = 3
		}
		cfgs[3].Voter, cfgs[4].Voter = VoterNever, VoterNever
		cfgs[4].Diskless = true
		nodes := startAll(t, ctx, cfgs)
		defer func() {
			for i := len(nodes) - 1; i >= 0; i-- {
				if nodes[i] != nil {
					_ = nodes[i].Close(ctx)
				}
			}
		}()
		for _, n := range nodes {
			if err := n.WaitSettled(ctx); err != nil {
				t.Fatalf("%s not settled: %v", n.ID(), err)
			}
		}
		if !waitTrue(ctx, func() bool {
			return nodes[0].be.(*netBackend).fsm.State().VersionActive(ledger.VersionStreamMembers)
		}) {
			t.Fatalf("cluster version 5 never active: %d", nodes[0].be.(*netBackend).fsm.State().ActiveVersion())
		}
		if !waitTrue(ctx, func() bool {
			for _, s := range raftServers(nodes[0]) {
				if s.ID == "n4" || s.ID == "n5" {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("members still in raft: %v", raftServers(nodes[0]))
		}
		for _, m := range nodes[3:] {
			if !waitTrue(ctx, func() bool {
				st := m.Status()
				return st.Stream.Following && st.Stream.Entries > 0 && m.Health().Status == Healthy
			}) {
				t.Fatalf("%s: stream %+v, health %+v", m.ID(), m.Status().Stream, m.Health())
			}
			sameReplica(t, ctx, m, nodes[0])
			// A member holds no Raft state once it is on the stream: the
			// instance it ran below version 5 is shut down.
			g := m.be.(*netBackend).ctl.(*clusterControl).g
			if !waitTrue(ctx, func() bool { return !g.HasRaft() }) {
				t.Fatalf("%s on the stream still runs raft", m.ID())
			}
		}
		owned := func(id string) int {
			c := 0
			for _, s := range nodes[0].Shards() {
				if s.Owner == id && s.Valid {
					c++
				}
			}
			return c
		}
		if owned("n4") == 0 || owned("n5") == 0 {
			t.Fatalf("members own no shards: n4 %d, n5 %d", owned("n4"), owned("n5"))
		}
		if srv := nodes[0].Status().Stream; srv.Following {
			t.Fatalf("a voter follows the stream: %+v", srv)
		}

		// Crash the voter n4 follows; n4 resumes elsewhere.
		server := nodes[3].Status().Stream.Server
		victim := -1
		for i, c := range cfgs[:3] {
			if c.RaftAddr == server {
				victim = i
			}
		}
		if victim < 0 {
			t.Fatalf("n4 follows %q, not a voter", server)
		}
		tr.Crash(nodes[victim])
		nodes[victim] = nil
		var other *Node
		for _, n := range nodes[:3] {
			if n != nil {
				other = n
			}
		}
		if !waitTrue(ctx, func() bool {
			st := nodes[3].Status().Stream
			return st.Server != server && st.Reconnects > 0
		}) {
			t.Fatalf("n4 did not move off the crashed voter: %+v", nodes[3].Status().Stream)
		}
		// The crashed voter's shards move (commits after the crash).
		if !waitTrue(ctx, func() bool { return owned2(other, cfgs[victim].NodeID) == 0 }) {
			t.Fatalf("%s's shards never moved", cfgs[victim].NodeID)
		}
		sameReplica(t, ctx, nodes[3], other)
		sameReplica(t, ctx, nodes[4], other)
		if h := nodes[3].Health(); strings.Contains(fmt.Sprint(h.Reasons), "stream") {
			t.Fatalf("n4 health after resuming: %+v", h)
		}
	})
}

// A member on the stream is not ready until its replica caught up with a
// voter, nor while it is more than the bound behind; a voter never is
// held back by the stream.
func TestStreamProblem(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		s    StreamStatus
		want string // substring; "" = ready
	}{
		{"voter", StreamStatus{Following: false}, ""},
		{"never caught up", StreamStatus{Following: true}, "not caught up"},
		{"caught up", StreamStatus{Following: true, CaughtUp: now}, ""},
		{"a little behind", StreamStatus{Following: true, CaughtUp: now.Add(-time.Second), Behind: time.Second, LagEntries: 3}, ""},
		{"too far behind", StreamStatus{Following: true, CaughtUp: now.Add(-time.Minute), Behind: time.Minute, LagEntries: 300, Server: "v1"}, "behind (300 entries; server v1)"},
	} {
		got := streamProblem(tc.s, 5*time.Second)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: streamProblem = %q, want %q", tc.name, got, tc.want)
		}
	}
}
