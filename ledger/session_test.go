package ledger

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

func sessionFSM(t *testing.T, cfg Config) (*FSM, *counterSM, func(Command) Result) {
	t.Helper()
	f, err := NewFSM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sm := newCounterSM()
	if err := f.RegisterStateMachine("count", sm); err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	return f, sm, func(c Command) Result {
		idx++
		return f.ApplyCommand(idx, c)
	}
}

// ownShard registers n1 and grants it shard s (epoch 1).
func ownShard(t *testing.T, apply func(Command) Result, s uint32) {
	t.Helper()
	if r := apply(Heartbeat{Node: "n1", Incarnation: 1, Now: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(Grant{Shard: s, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
}

// TestSessionDedup: the same request id twice answers the first
// application's result — a keyed enqueue that created its job still says
// created (Duplicate false), an App command is applied once — while another
// id or no id sees the ordinary duplicate key.
func TestSessionDedup(t *testing.T) {
	_, sm, apply := sessionFSM(t, DefaultConfig())
	ownShard(t, apply, 3)
	id1, id2 := RequestID{1}, RequestID{2}
	enq := JobEnqueue{Shard: 3, Key: "welcome/alice", Type: "mail", Payload: []byte("hello"), Now: 10}

	first := apply(Session{ID: id1, Command: enq})
	if first.Err != nil || first.Duplicate || first.Replayed || first.Job.ID == 0 {
		t.Fatalf("first enqueue: %+v", first)
	}
	again := apply(Session{ID: id1, Command: JobEnqueue{Shard: 3, Key: "welcome/alice", Type: "mail", Payload: []byte("hello"), Now: 20}})
	if again.Err != nil || again.Duplicate || !again.Replayed || again.Job.ID != first.Job.ID || string(again.Job.Payload) != "hello" {
		t.Fatalf("retry with the same id: %+v, want the first result (created, job %d)", again, first.Job.ID)
	}
	if again.Index == first.Index {
		t.Fatalf("the replay reports the retry's own index, got the first's %d", again.Index)
	}
	other := apply(Session{ID: id2, Command: enq})
	if other.Err != nil || !other.Duplicate || other.Replayed || other.Job.ID != first.Job.ID {
		t.Fatalf("another request with the same key: %+v, want the existing job as a duplicate", other)
	}
	plain := apply(enq)
	if !plain.Duplicate || plain.Job.ID != first.Job.ID {
		t.Fatalf("plain enqueue of the same key: %+v", plain)
	}
	// A duplicate remembered as such replays as a duplicate.
	if r := apply(Session{ID: id2, Command: enq}); !r.Duplicate || !r.Replayed {
		t.Fatalf("replay of a duplicate: %+v", r)
	}

	// App: applied once, the response replayed.
	app := App{Shard: 3, Epoch: 1, Type: "count", Payload: []byte("x"), Now: 30}
	a1 := apply(Session{ID: RequestID{3}, Command: app})
	a2 := apply(Session{ID: RequestID{3}, Command: app})
	if a1.Err != nil || a2.Err != nil || !bytes.Equal(a1.Response, a2.Response) || !a2.Replayed {
		t.Fatalf("app twice: %+v / %+v", a1, a2)
	}
	if got := len(sm.logs[3]); got != 1 {
		t.Fatalf("the state machine applied %d commands, want 1", got)
	}
	// A rejection is remembered too: the retry of a stale command stays
	// rejected, whatever happened since.
	stale := App{Shard: 3, Epoch: 7, Type: "count", Payload: []byte("y"), Now: 31}
	if r := apply(Session{ID: RequestID{4}, Command: stale}); !errors.Is(r.Err, ErrStaleEpoch) {
		t.Fatalf("stale app: %v", r.Err)
	}
	if r := apply(Session{ID: RequestID{4}, Command: stale}); !errors.Is(r.Err, ErrStaleEpoch) || !r.Replayed {
		t.Fatalf("stale app replayed: %+v", r)
	}
	// An id reused for another command is refused, not answered.
	if r := apply(Session{ID: id1, Command: app}); !errors.Is(r.Err, ErrInvalid) || r.Replayed {
		t.Fatalf("id reused for an app command: %+v", r)
	}
	for _, bad := range []Session{{ID: RequestID{}, Command: app}, {ID: RequestID{9}, Command: Batch{}}, {ID: RequestID{9}}} {
		if r := apply(bad); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", bad, r.Err)
		}
	}
	if got := len(sm.logs[3]); got != 1 {
		t.Fatalf("the state machine applied %d commands, want 1", got)
	}
}

// TestSessionWindow: the table forgets the oldest ids beyond MaxSessions
// and ids older than SessionWindow (by the commands' Now); a forgotten id
// is applied as new.
func TestSessionWindow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions, cfg.SessionWindow = 3, time.Second
	f, sm, apply := sessionFSM(t, cfg)
	ownShard(t, apply, 1)
	app := func(id byte, now int64) Result {
		return apply(Session{ID: RequestID{id}, Command: App{Shard: 1, Epoch: 1, Type: "count", Payload: []byte{'a' + id}, Now: now}})
	}
	for id := byte(1); id <= 4; id++ {
		app(id, int64(id))
	}
	if n := f.State().NumSessions(); n != 3 {
		t.Fatalf("%d sessions, want 3 (MaxSessions)", n)
	}
	if _, ok := f.State().Session(RequestID{1}); ok {
		t.Fatal("the oldest id survived the count bound")
	}
	if r := app(2, 5); !r.Replayed {
		t.Fatalf("id 2 within the window: %+v", r)
	}
	if r := app(1, 6); r.Replayed { // forgotten: applied again (a second entry in the state machine)
		t.Fatalf("id 1 past the count bound replayed: %+v", r)
	}
	// Age: everything before now-1s goes when a session command at now is applied.
	now := int64(time.Second) + 4
	if r := app(3, now); r.Replayed {
		t.Fatalf("id 3 (now 3) at now %d is past the window but replayed", now)
	}
	if _, ok := f.State().Session(RequestID{2}); ok {
		t.Fatal("id 2 (now 2) outlived the 1 s window")
	}
	if _, ok := f.State().Session(RequestID{4}); !ok {
		t.Fatal("id 4 (now 4) is exactly 1 s old: still in the window")
	}
	if got := len(sm.logs[1]); got != 6 { // 1 2 3 4, then 1 and 3 again
		t.Fatalf("state machine applied %d, want 6", got)
	}
}

// TestSessionSnapshotRoundTrip: the session table survives a snapshot —
// a retry after a restore still replays — and a snapshot of the restored
// state is byte-identical.
func TestSessionSnapshotRoundTrip(t *testing.T) {
	f, _, apply := sessionFSM(t, DefaultConfig())
	ownShard(t, apply, 2)
	created := apply(Session{ID: RequestID{7}, Command: JobEnqueue{Shard: 2, Key: "k", Payload: []byte("p"), Now: 5}})
	apply(Session{ID: RequestID{8}, Command: App{Shard: 2, Epoch: 1, Type: "count", Payload: []byte("z"), Now: 6}})
	apply(Session{ID: RequestID{9}, Command: App{Shard: 2, Epoch: 5, Type: "count", Now: 7}}) // stale, remembered
	snap1 := snapshotBytes(t, f)

	g, sm2, _ := sessionFSM(t, DefaultConfig())
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap1))); err != nil {
		t.Fatal(err)
	}
	if a, b := dumpState(f.State()), dumpState(g.State()); a != b {
		t.Fatalf("restored state differs:\n%s\nvs\n%s", a, b)
	}
	if snap2 := snapshotBytes(t, g); !bytes.Equal(snap1, snap2) {
		t.Fatal("snapshot of the restored state differs")
	}
	r := g.ApplyCommand(100, Session{ID: RequestID{7}, Command: JobEnqueue{Shard: 2, Key: "k", Payload: []byte("p"), Now: 8}})
	if !r.Replayed || r.Duplicate || r.Job.ID != created.Job.ID {
		t.Fatalf("retry after restore: %+v", r)
	}
	r = g.ApplyCommand(101, Session{ID: RequestID{9}, Command: App{Shard: 2, Epoch: 5, Type: "count", Now: 9}})
	if !r.Replayed || !errors.Is(r.Err, ErrStaleEpoch) {
		t.Fatalf("replayed rejection after restore lost its sentinel: %+v", r)
	}
	r = g.ApplyCommand(102, Session{ID: RequestID{8}, Command: App{Shard: 2, Epoch: 1, Type: "count", Payload: []byte("z"), Now: 9}})
	if !r.Replayed || len(sm2.logs[2]) != 1 {
		t.Fatalf("app retried after restore: %+v, state machine %v", r, sm2.logs)
	}
	// Every strict prefix of the snapshot is refused, never a panic.
	for i := range snap1 {
		h, _, _ := sessionFSM(t, DefaultConfig())
		if err := h.Restore(io.NopCloser(bytes.NewReader(snap1[:i]))); err == nil {
			t.Fatalf("prefix of %d/%d bytes restored", i, len(snap1))
		}
	}
}

// TestSessionEncoding: version 4 on the wire; a session in an older entry,
// a nested session or batch and the zero id are refused by Decode; Encode
// refuses what Decode would.
func TestSessionEncoding(t *testing.T) {
	s := Session{ID: RequestID{1}, Command: App{Shard: 1, Type: "t", Payload: []byte("p")}}
	b := MustEncode(s)
	if b[0] != 4 || Kind(b[1]) != KindSession {
		t.Fatalf("header %x", b[:2])
	}
	if b := MustEncode(Batch{Commands: []Command{Heartbeat{Node: "a"}, s}}); b[0] != 4 {
		t.Fatalf("batch holding a session encoded at version %d", b[0])
	}
	for _, c := range []Command{Heartbeat{Node: "a"}, JobEnqueue{Key: "k"}, App{Type: "t"}} {
		if b := MustEncode(c); b[0] >= 4 {
			t.Fatalf("%T without a request id encoded at version %d", c, b[0])
		}
	}
	old := append([]byte{3}, b[1:]...)
	if _, err := Decode(old); !errors.Is(err, ErrMalformed) {
		t.Fatalf("session in a version 3 entry: %v", err)
	}
	zero := append([]byte{4, byte(KindSession)}, make([]byte, 16)...)
	zero = append(zero, MustEncode(App{Type: "t"})[1:]...)
	if _, err := Decode(zero); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zero id: %v", err)
	}
	nested := append([]byte{4, byte(KindSession)}, RequestID{2}.bytes()...)
	nested = append(nested, b[1:]...)
	if _, err := Decode(nested); !errors.Is(err, ErrMalformed) {
		t.Fatalf("nested session: %v", err)
	}
	inBatch := append([]byte{4, byte(KindSession)}, RequestID{2}.bytes()...)
	inBatch = append(inBatch, MustEncode(Batch{Commands: []Command{App{Type: "t"}}})[1:]...)
	if _, err := Decode(inBatch); !errors.Is(err, ErrMalformed) {
		t.Fatalf("session wrapping a batch: %v", err)
	}
	for _, c := range []Command{Session{ID: RequestID{1}}, Session{Command: App{}}, Session{ID: RequestID{1}, Command: s},
		Session{ID: RequestID{1}, Command: Batch{}}} {
		if _, err := Encode(c); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Encode(%+v) = %v, want ErrInvalid", c, err)
		}
	}
	// The previous release's decoder (versions 1 to 3) stops at it: what
	// the version gate protects.
	if versionFor(s) <= 3 {
		t.Fatal("a session fits an encoding older releases read")
	}
}

func (id RequestID) bytes() []byte { return id[:] }
