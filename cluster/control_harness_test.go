package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// fakeGossip is a shared membership view for control-group tests: every node
// sees the same members. Events are published to all subscriptions without
// blocking (dropped when a buffer is full).
type fakeGossip struct {
	mu      sync.Mutex
	members map[string]Member
	subs    []*fakeSub
}

func newFakeGossip() *fakeGossip { return &fakeGossip{members: map[string]Member{}} }

func (f *fakeGossip) Members() []Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Member, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (f *fakeGossip) Subscribe(buffer int) EventStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &fakeSub{ch: make(chan []gossip.Event, buffer), g: f}
	f.subs = append(f.subs, s)
	return s
}

// set records m and publishes an event of kind.
func (f *fakeGossip) set(m Member, kind gossip.EventKind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members[m.ID] = m
	for _, s := range f.subs {
		s.publish([]gossip.Event{{Kind: kind, Member: m}})
	}
}

func (f *fakeGossip) state(id string, st gossip.MemberState, kind gossip.EventKind) {
	f.mu.Lock()
	m, ok := f.members[id]
	f.mu.Unlock()
	if !ok {
		return
	}
	m.State = st
	f.set(m, kind)
}

func (f *fakeGossip) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.members, id)
}

type fakeSub struct {
	g       *fakeGossip
	mu      sync.Mutex
	ch      chan []gossip.Event
	dropped uint64
	closed  bool
}

func (s *fakeSub) publish(b []gossip.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.ch <- b:
	default:
		s.dropped++
	}
}

func (s *fakeSub) C() <-chan []gossip.Event { return s.ch }
func (s *fakeSub) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}
func (s *fakeSub) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

var _ PeerSource = (*fakeGossip)(nil)

// testFSM records applied commands once each (a repeated command is a
// no-op, as a compare-and-set ledger command would be, so tests may retry
// after an unknown outcome). A command "fail" returns an error response;
// everything else returns "ok:<cmd>".
type testFSM struct {
	mu   sync.Mutex
	log  []string
	seen map[string]bool
}

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Type != raft.LogCommand {
		return nil
	}
	cmd := string(l.Data)
	switch cmd {
	case "fail":
		return errors.New("boom")
	case "int":
		return 42 // cannot cross the RPC
	case "marshaler":
		return binaryResult("m!")
	}
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	if !f.seen[cmd] {
		f.seen[cmd] = true
		f.log = append(f.log, cmd)
	}
	return []byte("ok:" + cmd)
}

func (f *testFSM) entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.log)
	return fsmSnap(b), err
}

func (f *testFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var log []string
	if err := json.NewDecoder(r).Decode(&log); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = log
	f.seen = map[string]bool{}
	for _, c := range log {
		f.seen[c] = true
	}
	return nil
}

type binaryResult string

func (b binaryResult) MarshalBinary() ([]byte, error) { return []byte(b), nil }

type fsmSnap []byte

func (s fsmSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
func (s fsmSnap) Release() {}

// harness runs control-group nodes in one process, over RaftMemNetwork (mem)
// or loopback TCP with bolt stores.
type harness struct {
	t      testing.TB
	logBuf *lockedBuffer
	mem    *RaftMemNetwork
	gossip *fakeGossip
	dir    string
	nodes  map[string]*testNode
	cfg    func(*ControlConfig)
	ports  int
}

type testNode struct {
	id     string
	addr   string
	inc    uint64
	g      *ControlGroup
	fsm    *testFSM
	log    raft.LogStore
	stable raft.StableStore
	snap   raft.SnapshotStore
	bolt   *raftboltdb.BoltStore
}

func newMemHarness(t testing.TB, seed int64) *harness {
	return &harness{t: t, mem: NewRaftMemNetwork(seed), gossip: newFakeGossip(), nodes: map[string]*testNode{}, logBuf: &lockedBuffer{}}
}

func newTCPHarness(t testing.TB) *harness {
	return &harness{t: t, gossip: newFakeGossip(), dir: t.TempDir(), nodes: map[string]*testNode{}, logBuf: &lockedBuffer{}}
}

// lockedBuffer collects the nodes' logs; they are printed if the test fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		l.b.Reset()
		l.b.WriteString("[earlier logs dropped]\n")
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger() *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// start starts (or restarts, keeping its stores) node id.
func (h *harness) start(id string) *testNode { return h.startAt(id, "") }

// startAt is start with a given in-memory address for a new node.
func (h *harness) startAt(id, addr string) *testNode {
	h.t.Helper()
	n := h.nodes[id]
	if n == nil {
		n = &testNode{id: id}
		h.nodes[id] = n
		if h.mem != nil {
			h.ports++
			n.addr = addr
			if n.addr == "" {
				n.addr = fmt.Sprintf("10.0.0.%d:7000", h.ports)
			}
			store := raft.NewInmemStore()
			n.log, n.stable, n.snap = store, store, raft.NewInmemSnapshotStore()
		}
	}
	n.inc++
	n.fsm = &testFSM{}
	cfg := TestControlConfig()
	cfg.NodeID = id
	cfg.Incarnation = n.inc
	cfg.FSM = n.fsm
	cfg.Logger = testLogger()
	if cfg.Logger == nil && h.logBuf != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(h.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if h.mem != nil {
		cfg.Transport = h.mem.Transport(n.addr)
		cfg.StreamLayer = h.mem.StreamLayer(n.addr)
	} else {
		dir := filepath.Join(h.dir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			h.t.Fatal(err)
		}
		bs, err := raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(dir, "raft.db"),
			BoltOptions: &bbolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
		})
		if err != nil {
			h.t.Fatal(err)
		}
		snap, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
		if err != nil {
			h.t.Fatal(err)
		}
		n.bolt, n.log, n.stable, n.snap = bs, bs, bs, snap
		cfg.BindAddr = "127.0.0.1:0"
	}
	cfg.LogStore, cfg.StableStore, cfg.SnapshotStore = n.log, n.stable, n.snap
	if h.cfg != nil {
		h.cfg(&cfg)
	}
	g, err := NewControlGroup(cfg, h.gossip)
	if err != nil {
		h.t.Fatalf("start %s: %v", id, err)
	}
	n.g = g
	n.addr = g.Addr()
	h.gossip.set(Member{Meta: Meta{ID: id, RaftAddr: n.addr, Incarnation: n.inc}, Addr: n.addr, State: StateAlive}, gossip.EventJoin)
	return n
}

// stop closes node id without leaving (a crash, for the cluster).
func (h *harness) stop(id string) {
	h.t.Helper()
	n := h.nodes[id]
	if n.g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.g.Close(ctx); err != nil {
		h.t.Errorf("close %s: %v", id, err)
	}
	n.g = nil
	if n.bolt != nil {
		_ = n.bolt.Close()
		n.bolt = nil
	}
}

func (h *harness) closeAll() {
	if h.t.Failed() && h.logBuf != nil {
		h.t.Logf("node logs:\n%s", h.logBuf.String())
	}
	ids := h.ids()
	for _, id := range ids {
		h.stop(id)
	}
}

func (h *harness) ids() []string {
	var ids []string
	for id := range h.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (h *harness) running() []*testNode {
	var out []*testNode
	for _, id := range h.ids() {
		if n := h.nodes[id]; n.g != nil {
			out = append(out, n)
		}
	}
	return out
}

// waitFor polls cond until it holds or timeout passes (virtual time inside
// synctest).
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			if os.Getenv("TENURE_TEST_STACKS") != "" {
				buf := make([]byte, 1<<22)
				t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
			}
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leader returns the running node that holds established leadership, nil if
// none or more than one.
func (h *harness) leader() *testNode {
	var out *testNode
	for _, n := range h.running() {
		if n.g.established.Load() != 0 && n.g.IsLeader() {
			if out != nil {
				return nil
			}
			out = n
		}
	}
	return out
}

func (h *harness) waitLeader(timeout time.Duration) *testNode {
	h.t.Helper()
	var l *testNode
	waitFor(h.t, timeout, "one established leader", func() bool {
		l = h.leader()
		return l != nil
	})
	return l
}

// config returns the leader's configuration as "id:V|N" strings.
func configString(servers []ServerInfo) string {
	var b bytes.Buffer
	for i, s := range servers {
		if i > 0 {
			b.WriteByte(' ')
		}
		kind := "N"
		if s.Voter {
			kind = "V"
		}
		fmt.Fprintf(&b, "%s:%s", s.ID, kind)
	}
	return b.String()
}

func (h *harness) waitConfig(timeout time.Duration, want string) {
	h.t.Helper()
	var got string
	waitFor(h.t, timeout, "configuration "+want, func() bool {
		l := h.leader()
		if l == nil {
			return false
		}
		s, err := l.g.Servers()
		if err != nil {
			return false
		}
		got = configString(s)
		return got == want
	})
}

// apply applies cmd through node n with a generous deadline, retrying after
// an unknown outcome as a caller of idempotent commands may.
func (h *harness) apply(n *testNode, cmd string, timeout time.Duration) Applied {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := n.g.Apply(ctx, []byte(cmd))
	for errors.Is(err, ErrLeadershipLost) && ctx.Err() == nil {
		h.t.Logf("apply %q via %s: %v; retrying", cmd, n.id, err)
		res, err = n.g.Apply(ctx, []byte(cmd))
	}
	if err != nil {
		h.t.Fatalf("apply %q via %s: %v", cmd, n.id, err)
	}
	if string(res.Response) != "ok:"+cmd {
		h.t.Fatalf("apply %q via %s: response %q", cmd, n.id, res.Response)
	}
	return res
}

// waitApplied waits until every running node's FSM holds want, in order.
func (h *harness) waitApplied(timeout time.Duration, want []string) {
	h.t.Helper()
	waitFor(h.t, timeout, fmt.Sprintf("%d entries on every node", len(want)), func() bool {
		for _, n := range h.running() {
			got := n.fsm.entries()
			if len(got) < len(want) {
				return false
			}
			for i := range want {
				if got[i] != want[i] {
					h.t.Fatalf("node %s entry %d = %q, want %q (log %q)", n.id, i, got[i], want[i], got)
				}
			}
		}
		return true
	})
}
