package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/gossip"
	"github.com/tenurehq/tenure/cluster/internal/raftwire"
	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// seqFSM records every entry it applies, in order, with its index — no
// deduplication, so a double apply or a skipped entry shows — and its
// applied index travels in its snapshot (as the ledger's does).
type seqFSM struct {
	mu      sync.Mutex
	applied uint64
	log     []seqEntry
	// regressed counts restores that took the state back in time.
	regressed int
}

type seqEntry struct {
	Index uint64
	Data  string
}

func (f *seqFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index <= f.applied {
		panic(fmt.Sprintf("seqFSM: index %d applied after %d", l.Index, f.applied))
	}
	f.applied = l.Index
	if l.Type == raft.LogCommand {
		f.log = append(f.log, seqEntry{l.Index, string(l.Data)})
	}
	return []byte("ok:" + string(l.Data))
}

func (f *seqFSM) appliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// state returns the applied index and a hash of the whole state.
func (f *seqFSM) state() (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := fnv.New64a()
	var b [8]byte
	for _, e := range f.log {
		binary.BigEndian.PutUint64(b[:], e.Index)
		h.Write(b[:])
		h.Write([]byte(e.Data))
	}
	return f.applied, h.Sum64()
}

func (f *seqFSM) entries() []seqEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

type seqSnap struct {
	Applied uint64
	Log     []seqEntry
}

func (f *seqFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(seqSnap{f.applied, f.log})
	return fsmSnap(b), err
}

func (f *seqFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var s seqSnap
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Applied < f.applied {
		f.regressed++
	}
	f.applied, f.log = s.Applied, s.Log
	return nil
}

// streamHarness is a mem harness whose nodes run seqFSMs (kept across a
// node's restarts, as a disk-backed replica keeps its state) with the
// stream on; ids in members are VoterNever.
type streamHarness struct {
	*harness
	fsms    map[string]*seqFSM
	members map[string]bool
	active  atomic.Bool
	tune    func(*ControlConfig)
}

func newStreamHarness(t testing.TB, members ...string) *streamHarness {
	sh := &streamHarness{harness: newMemHarness(t, 1), fsms: map[string]*seqFSM{}, members: map[string]bool{}}
	for _, m := range members {
		sh.members[m] = true
	}
	sh.active.Store(true)
	sh.cfg = func(c *ControlConfig) {
		f := sh.fsms[c.NodeID]
		if f == nil {
			f = &seqFSM{}
			sh.fsms[c.NodeID] = f
		}
		c.FSM = f
		c.AppliedIndex = f.appliedIndex
		c.StreamActive = sh.active.Load
		c.StreamWait = 500 * time.Millisecond
		if sh.members[c.NodeID] {
			c.Voter = VoterNever
		}
		if sh.tune != nil {
			sh.tune(c)
		}
	}
	return sh
}

func (sh *streamHarness) start(id string) *testNode {
	n := sh.harness.start(id)
	tags := map[string]string{TagStream: "1"}
	if sh.members[id] {
		tags[TagVoter] = string(VoterNever)
	}
	sh.gossip.set(Member{Meta: Meta{ID: id, RaftAddr: n.addr, Incarnation: n.inc, Tags: tags}, Addr: n.addr, State: StateAlive}, gossip.EventUpdate)
	return n
}

// applyN applies count commands through node n, named prefix0...
func (sh *streamHarness) applyN(n *testNode, prefix string, count int) {
	for i := range count {
		sh.apply(n, fmt.Sprintf("%s%d", prefix, i), 30*time.Second)
	}
}

// waitSame waits until member's replica equals voter's (index and hash).
func (sh *streamHarness) waitSame(member, voter string) {
	sh.t.Helper()
	waitFor(sh.t, 30*time.Second, member+" at "+voter+"'s index and hash", func() bool {
		mi, mh := sh.fsms[member].state()
		vi, vh := sh.fsms[voter].state()
		return mi == vi && mh == vh && mi > 0
	})
}

// checkSeq fails if member's entries are not exactly voter's (no entry
// twice, none skipped).
func (sh *streamHarness) checkSeq(member, voter string) {
	sh.t.Helper()
	got, want := sh.fsms[member].entries(), sh.fsms[voter].entries()
	if !slices.Equal(got, want) {
		sh.t.Fatalf("%s applied %d entries, %s %d; first difference: %v", member, len(got), voter, len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []seqEntry) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %v vs %v", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(a), len(b))
}

func TestStreamMemberFollowsOutsideRaft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		// Commands proposed by the member reach the leader over RPC.
		sh.applyN(sh.nodes["m1"], "a", 20)
		l := sh.waitLeader(30 * time.Second)
		sh.waitSame("m1", l.id)
		sh.checkSeq("m1", l.id)
		st := sh.nodes["m1"].g.StreamStatus()
		if !st.Following || st.Entries == 0 || st.Server == "" {
			t.Fatalf("member stream status %+v", st)
		}
		if sh.nodes["m1"].g.HasRaft() {
			t.Fatal("a member on the stream runs a raft instance")
		}
		if id, _ := sh.nodes["m1"].g.Leader(); id != l.id {
			t.Fatalf("member's leader %q, want %q", id, l.id)
		}
		if got := sh.nodes["m1"].g.Voters(); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
			t.Fatalf("member's voters %v", got)
		}
		if s, _ := l.g.Servers(); containsServer(s, "m1") {
			t.Fatalf("member in the raft configuration: %v", configString(s))
		}
		// The leader is the last choice: members subscribe to followers.
		if srv := sh.nodes["m1"].g.StreamStatus().Server; srv == l.addr {
			t.Fatalf("member follows the leader %s while followers serve", srv)
		}
	})
}

// A member follows the stream while its serving voter is killed, while its
// connection is cut mid-way, and after the buffer moved past it (snapshot):
// it ends at every voter's index and hash, each entry applied once.
func TestStreamResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		sh.tune = func(c *ControlConfig) { c.StreamBuffer = 16 }
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		m := sh.nodes["m1"]
		sh.applyN(m, "a", 10)
		l := sh.waitLeader(30 * time.Second)
		sh.waitSame("m1", l.id)

		// 1. Kill the voter the member follows (not the leader: followers
		// serve first).
		srv := m.g.StreamStatus().Server
		var killed string
		for _, n := range sh.running() {
			if n.addr == srv {
				killed = n.id
			}
		}
		if killed == "" || killed == l.id {
			t.Fatalf("member follows %q (leader %s)", srv, l.id)
		}
		sh.stop(killed)
		sh.applyN(l, "b", 10)
		sh.waitSame("m1", l.id)
		if s := m.g.StreamStatus().Server; s == srv {
			t.Fatalf("member still on killed %s", s)
		}
		sh.start(killed)

		// 2. Cut the connection mid-way, while entries flow.
		srv = m.g.StreamStatus().Server
		done := make(chan struct{})
		go func() {
			defer close(done)
			sh.applyN(l, "c", 10)
		}()
		time.Sleep(50 * time.Millisecond)
		sh.mem.Cut(m.addr, srv)
		time.Sleep(time.Second)
		sh.mem.HealLink(m.addr, srv)
		<-done
		sh.waitSame("m1", l.id)
		if st := m.g.StreamStatus(); st.Reconnects < 2 {
			t.Fatalf("reconnects %d after a kill and a cut", st.Reconnects)
		}

		// 3. The buffer (16 entries) moves past the member: snapshot.
		sh.mem.Isolate(m.addr)
		sh.applyN(l, "d", 40)
		sh.mem.Heal()
		sh.waitSame("m1", l.id)
		if st := m.g.StreamStatus(); st.Snapshots == 0 {
			t.Fatalf("no snapshot after the buffer moved on: %+v", st)
		}
		for _, v := range []string{"n1", "n2", "n3"} {
			sh.waitSame(v, l.id)
			sh.waitSame("m1", v)
			sh.checkSeq("m1", v)
		}
	})
}

// A member that restarts from its replica's index resumes there.
func TestStreamMemberRestartResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		l := sh.waitLeader(30 * time.Second)
		sh.applyN(l, "a", 5)
		sh.waitSame("m1", l.id)
		sh.stop("m1")
		sh.applyN(l, "b", 5)
		sh.start("m1")
		sh.waitSame("m1", l.id)
		sh.checkSeq("m1", l.id)
		if st := sh.nodes["m1"].g.StreamStatus(); st.Snapshots != 0 {
			t.Fatalf("resumed with a snapshot while the buffer held its index: %+v", st)
		}
	})
}

// Before the stream is active, a member is a Raft non-voter as before;
// once active, the leader removes it and it follows the stream without a
// gap or a repeat.
func TestStreamSwitchFromRaft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		sh.active.Store(false)
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "m1:N n1:V n2:V n3:V")
		l := sh.waitLeader(30 * time.Second)
		sh.applyN(l, "a", 10)
		sh.waitSame("m1", l.id)
		if st := sh.nodes["m1"].g.StreamStatus(); st.Entries != 0 {
			t.Fatalf("member used the stream before it was active: %+v", st)
		}
		if !sh.nodes["m1"].g.HasRaft() {
			t.Fatal("below the stream's version a member runs no raft: it cannot be a non-voter")
		}
		sh.active.Store(true)
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		sh.applyN(l, "b", 10)
		sh.waitSame("m1", l.id)
		sh.checkSeq("m1", l.id)
		if st := sh.nodes["m1"].g.StreamStatus(); st.Entries == 0 {
			t.Fatalf("member not on the stream: %+v", st)
		}
		// Out of the configuration and on the stream, it drops its Raft.
		waitFor(t, 30*time.Second, "m1 drops raft", func() bool { return !sh.nodes["m1"].g.HasRaft() })
		sh.applyN(l, "c", 5)
		sh.waitSame("m1", l.id)
		sh.checkSeq("m1", l.id)
	})
}

// A member started with the voters of a fresh cluster, whose version
// becomes active within belowStreamGrace, never starts Raft: it is not
// added as a non-voter and removed again while the cluster forms.
func TestStreamFreshClusterMemberNoRaft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		sh.active.Store(false)
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		l := sh.waitLeader(30 * time.Second)
		grace := belowStreamGrace(500 * time.Millisecond)
		deadline := time.Now().Add(grace / 2)
		for time.Now().Before(deadline) {
			if sh.nodes["m1"].g.HasRaft() {
				t.Fatalf("m1 started raft within the grace (%v)", grace)
			}
			time.Sleep(10 * time.Millisecond)
		}
		sh.active.Store(true)
		sh.applyN(l, "a", 5)
		waitFor(t, 30*time.Second, "m1 on the stream", func() bool {
			if sh.nodes["m1"].g.HasRaft() {
				t.Fatal("m1 started raft although the version became active within the grace")
			}
			return sh.nodes["m1"].g.StreamStatus().Entries > 0
		})
		sh.waitSame("m1", l.id)
		sh.checkSeq("m1", l.id)
	})
}

// While the voters' cluster has recorded no version yet (a fresh
// cluster), a member keeps asking for the stream past the grace and never
// starts Raft; once a version below 5 is recorded, it starts Raft after
// the grace, to be a non-voter as before.
func TestStreamPendingMemberWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		sh.active.Store(false)
		var pending atomic.Bool
		pending.Store(true)
		sh.tune = func(c *ControlConfig) { c.StreamPending = pending.Load }
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		l := sh.waitLeader(30 * time.Second)
		grace := belowStreamGrace(500 * time.Millisecond)
		deadline := time.Now().Add(3 * grace)
		for time.Now().Before(deadline) {
			if sh.nodes["m1"].g.HasRaft() {
				t.Fatalf("m1 started raft while the cluster had recorded no version (grace %v)", grace)
			}
			// Nor does the leader add it as a non-voter (reconcileState.StreamPending):
			// its Raft port would refuse the leader until it is removed.
			conf, _ := l.g.latestConfiguration()
			for _, sv := range conf.Servers {
				if sv.ID == "m1" {
					t.Fatalf("the leader added m1 to the configuration while the cluster had recorded no version: %v", conf.Servers)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		pending.Store(false)
		waitFor(t, 30*time.Second, "m1 starts raft below version 5", func() bool { return sh.nodes["m1"].g.HasRaft() })
	})
}

func TestStreamFSMRefusesGapsAndRepeats(t *testing.T) {
	inner := &seqFSM{}
	f := newStreamFSM(inner, inner.appliedIndex, 0, 0)
	ent := func(prev, idx uint64) wire.StreamEntry {
		return wire.StreamEntry{Index: idx, Prev: prev, Term: 1, Type: uint8(raft.LogCommand), Data: fmt.Appendf(nil, "e%d", idx)}
	}
	if n, err := f.applyStream([]wire.StreamEntry{ent(0, 1), ent(1, 3)}); n != 2 || err != nil {
		t.Fatalf("applyStream = %d, %v", n, err)
	}
	for _, tc := range []struct {
		name    string
		entries []wire.StreamEntry
		applied int
	}{
		{"gap", []wire.StreamEntry{ent(4, 5)}, 0},
		{"repeat", []wire.StreamEntry{ent(1, 3)}, 0},
		{"repeat of the last", []wire.StreamEntry{ent(3, 3)}, 0},
		{"gap inside a batch", []wire.StreamEntry{ent(3, 4), ent(5, 6)}, 1},
		{"backwards", []wire.StreamEntry{ent(4, 2)}, 0},
		{"bad type", []wire.StreamEntry{{Index: 9, Prev: 4, Type: uint8(raft.LogNoop)}}, 0},
	} {
		before := inner.entries()
		n, err := f.applyStream(tc.entries)
		if !errors.Is(err, ErrStreamGap) || n != tc.applied {
			t.Fatalf("%s: applyStream = %d, %v; want %d, ErrStreamGap", tc.name, n, err, tc.applied)
		}
		if got := inner.entries(); len(got) != len(before)+tc.applied {
			t.Fatalf("%s: FSM holds %v", tc.name, got)
		}
	}
	// Raft's path skips what the stream already applied.
	f.ApplyBatch([]*raft.Log{{Index: 4, Type: raft.LogCommand, Data: []byte("dup")}, {Index: 7, Type: raft.LogCommand, Data: []byte("e7")}})
	if got := inner.entries(); len(got) != 4 || got[3].Index != 7 {
		t.Fatalf("after raft's batch: %v", got)
	}
}

func TestStreamFSMRingBounds(t *testing.T) {
	inner := &seqFSM{}
	f := newStreamFSM(inner, inner.appliedIndex, 4, 10)
	for i := uint64(1); i <= 6; i++ {
		f.Apply(&raft.Log{Index: i * 2, Type: raft.LogCommand, Data: []byte("xx")})
	}
	// 4 entries of 2 bytes: 6..12 (entries 2 and 4 evicted).
	if es, pos, _ := f.read(4, 100); pos != posEntries || len(es) != 4 || es[0].Index != 6 || es[0].Prev != 4 {
		t.Fatalf("read(4) = %v, %v", es, pos)
	}
	if _, pos, _ := f.read(2, 100); pos != posSnapshot {
		t.Fatalf("read(2) = %v, want a snapshot", pos)
	}
	if _, pos, _ := f.read(5, 100); pos != posSnapshot {
		t.Fatalf("read(5) (not an index of the stream) = %v, want a snapshot", pos)
	}
	if es, pos, _ := f.read(12, 100); pos != posEntries || len(es) != 0 {
		t.Fatalf("read(12) = %v, %v", es, pos)
	}
	if _, pos, _ := f.read(13, 100); pos != posAhead {
		t.Fatalf("read(13) = %v", pos)
	}
	if es, _, _ := f.read(4, 3); len(es) != 1 {
		t.Fatalf("read with 3 bytes = %d entries, want 1", len(es))
	}
	// The byte bound: one 8-byte entry leaves room for one 2-byte entry.
	f.Apply(&raft.Log{Index: 20, Type: raft.LogCommand, Data: []byte("12345678")})
	if es, pos, _ := f.read(12, 100); pos != posEntries || len(es) != 1 {
		t.Fatalf("after a big entry: %v, %v", es, pos)
	}
	if f.n != 2 || f.bytes != 10 {
		t.Fatalf("ring holds %d entries, %d bytes", f.n, f.bytes)
	}
}

// A server holds at most StreamMaxSubscribers calls and answers a stream
// request it cannot serve with CodeUnsupported.
func TestStreamServerCapAndRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t)
		sh.tune = func(c *ControlConfig) { c.StreamMaxSubscribers = 1 }
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3"} {
			sh.start(id)
		}
		l := sh.waitLeader(30 * time.Second)
		g := sh.nodes["n1"].g
		if l.id != "n1" {
			sh.apply(l, "x", 30*time.Second)
		}
		waitFor(t, 30*time.Second, "n1 serves", func() bool { return g.streamServingWhy() == "" })
		rpcs := &controlRPC{g: g}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r wire.SubscribeReply
			_ = rpcs.Subscribe(&wire.SubscribeArgs{From: g.rec.lastIndex(), Wait: 5 * time.Second, Leader: l.id}, &r)
		}()
		synctest.Wait()
		var r wire.SubscribeReply
		_ = rpcs.Subscribe(&wire.SubscribeArgs{From: g.rec.lastIndex(), Wait: time.Second, Leader: l.id}, &r)
		if r.Code != wire.CodeUnsupported {
			t.Fatalf("second subscriber: code %d (%s), want refused", r.Code, r.Msg)
		}
		wg.Wait()
		sh.active.Store(false)
		r = wire.SubscribeReply{}
		_ = rpcs.Subscribe(&wire.SubscribeArgs{}, &r)
		if r.Code != wire.CodeStreamNotActive {
			t.Fatalf("stream not active: code %d", r.Code)
		}
		r = wire.SubscribeReply{}
		_ = rpcs.Subscribe(nil, &r)
		if r.Code != wire.CodeBadRequest {
			t.Fatalf("nil args: code %d", r.Code)
		}
		if st := g.StreamStatus(); st.Refused < 2 {
			t.Fatalf("refused %d", st.Refused)
		}
	})
}

// Once members follow the stream, at most StreamStandbys voter-capable
// nodes stay Raft non-voters; the others follow the stream. When a voter
// leaves, a standby replaces it and a stream follower becomes the next
// standby, its replica equal to the voters' throughout.
func TestStreamStandbys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t)
		sh.tune = func(c *ControlConfig) {
			c.StreamStandbys = 1
			// Snapshots and compaction: n5 joins Raft by InstallSnapshot.
			c.SnapshotThreshold, c.TrailingLogs, c.SnapshotInterval = 4, 2, 50*time.Millisecond
		}
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		sh.start("n4")
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V n4:N")
		sh.start("n5")
		l := sh.waitLeader(30 * time.Second)
		sh.applyN(l, "a", 10)
		sh.waitSame("n5", l.id)
		sh.waitSame("n4", l.id)
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V n4:N")
		if st := sh.nodes["n5"].g.StreamStatus(); !st.Following || st.Entries == 0 {
			t.Fatalf("n5 not on the stream: %+v", st)
		}
		if st := sh.nodes["n4"].g.StreamStatus(); st.Following {
			t.Fatalf("standby n4 follows the stream: %+v", st)
		}
		// n5 (voter=auto, not a standby) follows the stream without Raft;
		// the standby n4 keeps its Raft.
		waitFor(t, 30*time.Second, "n5 drops raft", func() bool { return !sh.nodes["n5"].g.HasRaft() })
		if !sh.nodes["n4"].g.HasRaft() {
			t.Fatal("standby n4 runs no raft")
		}
		// Entries after the leader's last snapshot (fewer than its
		// threshold): n5's replica is ahead of the snapshot Raft will
		// install on it when it becomes a standby.
		time.Sleep(time.Second)
		sh.applyN(l, "c", 2)
		sh.waitSame("n5", l.id)
		// A voter that is not the leader leaves: n4 replaces it, n5
		// becomes the standby.
		var gone string
		for _, id := range []string{"n1", "n2", "n3"} {
			if id != l.id {
				gone = id
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sh.nodes[gone].g.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown %s: %v", gone, err)
		}
		sh.nodes[gone].g = nil
		want := map[string]string{"n1": "n1:V", "n2": "n2:V", "n3": "n3:V"}
		want[gone] = ""
		var parts []string
		for _, id := range []string{"n1", "n2", "n3"} {
			if want[id] != "" {
				parts = append(parts, want[id])
			}
		}
		sh.waitConfig(30*time.Second, strings.Join(append(parts, "n4:V", "n5:N"), " "))
		// The leader added n5 back as the standby: it runs Raft again.
		waitFor(t, 30*time.Second, "n5 starts raft as the standby", func() bool { return sh.nodes["n5"].g.HasRaft() })
		sh.applyN(l, "b", 10)
		for _, id := range []string{"n4", "n5"} {
			sh.waitSame(id, l.id)
			sh.checkSeq(id, l.id)
		}
		for id, f := range sh.fsms {
			if f.regressed > 0 {
				t.Errorf("%s: %d restores took the replica back in time", id, f.regressed)
			}
		}
	})
}

// A member learns a new leader from its stream at once, not at the end of
// a held Subscribe call.
func TestStreamLeaderChangeReachesMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t, "m1")
		sh.tune = func(c *ControlConfig) {
			if c.NodeID == "m1" {
				c.StreamWait = 20 * time.Second // a held call outlasts the election
			}
		}
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3", "m1"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		l := sh.waitLeader(30 * time.Second)
		sh.applyN(l, "a", 3)
		m := sh.nodes["m1"]
		waitFor(t, 30*time.Second, "member knows the leader", func() bool { id, _ := m.g.Leader(); return id == l.id })
		if srv := m.g.StreamStatus().Server; srv == l.addr {
			t.Fatalf("member follows the leader")
		}
		sh.stop(l.id)
		var nl *testNode
		waitFor(t, 30*time.Second, "a new leader", func() bool { nl = sh.leader(); return nl != nil })
		start := time.Now()
		waitFor(t, 30*time.Second, "member knows the new leader", func() bool { id, _ := m.g.Leader(); return id == nl.id })
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("member learned the new leader %v after it was established (held calls last 20 s)", d)
		}
	})
}

// A member on the stream runs no Raft: its Raft port closes a Raft stream
// on the first byte instead of queueing the message for a Raft that is not
// there (the sender would wait for its timeout).
func TestMemberRefusesRaftStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	h := newTCPHarness(t)
	defer h.closeAll()
	fsm := &seqFSM{}
	h.cfg = func(c *ControlConfig) {
		c.FSM, c.AppliedIndex, c.StreamActive = fsm, fsm.appliedIndex, func() bool { return true }
		c.Voter = VoterNever
	}
	m := h.start("m1")
	if m.g.HasRaft() {
		t.Fatal("a member runs raft")
	}
	start := time.Now()
	err := outsider{t: t, addr: m.addr}.raft(raftwire.RequestVote, &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:1")}, Term: 9})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("RequestVote to a member: %v after %v, want the connection closed at once", err, time.Since(start))
	}
}
