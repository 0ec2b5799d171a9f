package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func sampleCommands() []Command {
	return []Command{
		Heartbeat{Node: "n1", Incarnation: 3, Liveness: 2, Now: 1_700_000_000_000_000_000},
		ExpireNode{Node: "n1", Incarnation: 3, Liveness: 2, Seq: 99, Now: -5},
		SetDraining{Node: "n1", Incarnation: 3, Draining: true, Now: 7},
		Grant{Shard: 1<<32 - 1, ExpectedEpoch: 1<<64 - 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 4, Takeover: true, Now: 9, Reason: "join n2"},
		Revoke{Shard: 5, Epoch: 6, Target: "n3", Now: 1, Reason: "drain"},
		Release{Shard: 5, Epoch: 6, Owner: "n1", Now: 2},
		Release{Shard: 5, Epoch: 6, Owner: "n1", Now: 2, Avoid: true},
		Transfer{Shard: 5, Epoch: 6, From: "n1", To: "n3", ToIncarnation: 2, ToLiveness: 8, Now: 3, Reason: "handoff"},
		JobEnqueue{Shard: 2, Key: "order-17", Type: "email", Payload: []byte("hello"), MaxAttempts: 4, Now: 4},
		JobStart{Shard: 2, Epoch: 3, Owner: "n1", Job: 17, Attempt: 1, Timeout: 5e9, Now: 5},
		JobComplete{Shard: 2, Epoch: 3, Job: 17, Attempt: 2, Result: []byte{0, 1, 2}, Now: 6},
		JobFail{Shard: 2, Epoch: 3, Job: 17, Attempt: 2, Error: "smtp 451", Backoff: 1e9, Now: 7},
		App{Shard: 9, Epoch: 1, Type: "kv", Payload: []byte("set a=1"), Now: 8},
		Settings{JobRetention: 3600e9, MaxFinishedJobs: 1000, DefaultMaxAttempts: 3, Now: 9},
		Batch{Commands: []Command{Heartbeat{Node: "a", Incarnation: 1}, JobComplete{Shard: 1, Epoch: 1, Job: 1, Attempt: 1}}},
		DeclareElection{Group: "eu", Name: "indexer", Partitions: 271, Now: 10},
		PinShard{Shard: 7, Node: "n2", Reason: "hot tenant", Now: 13},
		PinShard{Shard: 7, Now: 14},
		ExcludeNode{Node: "n3", Exclude: true, Reason: "bad disk", Now: 15},
		ExcludeNode{Node: "n3", Now: 16},
		SetTakeoverPolicy{First: 2, Last: 1<<32 - 1, Fenced: true, Now: 17},
		SetTakeoverPolicy{First: 0, Last: 0, Now: 18},
		Session{ID: RequestID{8}, Command: SetTakeoverPolicy{First: 3, Last: 4, Fenced: true}},
		Session{ID: RequestID{7}, Command: PinShard{Shard: 1, Node: "n1"}},
		Batch{Commands: []Command{Release{Shard: 1, Epoch: 1, Owner: "a", Avoid: true}, DeclareElection{Group: "us", Name: "x", Partitions: 8}}},
		Session{ID: RequestID{1, 2, 3}, Command: JobEnqueue{Shard: 2, Key: "order-18", Type: "email", Payload: []byte("hi"), Now: 11}},
		Session{ID: RequestID{15: 9}, Command: Heartbeat{Node: "n1", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: 2}},
		Batch{Commands: []Command{Heartbeat{Node: "a", Incarnation: 1}, Session{ID: RequestID{4}, Command: App{Shard: 9, Epoch: 1, Type: "kv", Payload: []byte("x"), Now: 12}}}},
		ClaimIncarnation{Node: "member-7f9c", Now: 13, MinVersion: 1, MaxVersion: 3},
		Session{ID: RequestID{5}, Command: ClaimIncarnation{Node: "m", Now: -1}},
		LogSettings{MaxPayload: 1 << 20, JobRetention: 3600e9, MaxFinishedJobs: 1000, DefaultMaxAttempts: 3, SessionWindow: 600e9, MaxSessions: 65536, Now: 17},
		Session{ID: RequestID{6}, Command: LogSettings{MaxPayload: 1, JobRetention: 1, MaxFinishedJobs: 1, DefaultMaxAttempts: 1, SessionWindow: 1, MaxSessions: 1}},
	}
}

func TestEncodeRoundTripSamples(t *testing.T) {
	kinds := map[Kind]bool{}
	for _, c := range sampleCommands() {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("encode %#v: %v", c, err)
		}
		if b[0] != versionFor(c) || Kind(b[1]) != KindOf(c) {
			t.Fatalf("%T: header %x", c, b[:2])
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("decode %T: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, c)
		}
		kinds[KindOf(c)] = true
		// Every strict prefix is rejected, never a panic.
		for i := range b {
			if _, err := Decode(b[:i]); err == nil {
				t.Fatalf("%T: prefix of %d/%d bytes decoded", c, i, len(b))
			}
		}
	}
	for k := KindHeartbeat; k <= KindDeclareElection; k++ {
		if !kinds[k] {
			t.Errorf("no sample for %v", k)
		}
	}
}

func TestEncodeRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := newGen(rapid.Uint64().Draw(t, "seed"))
		m := newModel(propConfig())
		var cmds []Command
		for range rapid.IntRange(1, 20).Draw(t, "n") {
			c := g.command(m)
			m.apply(c)
			cmds = append(cmds, c)
		}
		for _, c := range append(cmds, Batch{Commands: cmds}) {
			b, err := Encode(c)
			if err != nil {
				t.Fatalf("encode %#v: %v", c, err)
			}
			got, err := Decode(b)
			if err != nil || !reflect.DeepEqual(got, c) {
				t.Fatalf("round trip of %#v: got %#v, %v", c, got, err)
			}
		}
	})
}

func TestEncodeRejects(t *testing.T) {
	long := strings.Repeat("x", MaxStringLen+1)
	for _, tc := range []struct {
		c    Command
		want error
	}{
		{nil, ErrInvalid},
		{Heartbeat{Node: long}, ErrTooLarge},
		{Grant{Reason: long}, ErrTooLarge},
		{Batch{Commands: []Command{Batch{}}}, ErrInvalid},
		{Batch{Commands: make([]Command, MaxBatchEntries+1)}, ErrTooLarge},
		{App{Payload: make([]byte, MaxCommandSize)}, ErrTooLarge},
	} {
		if _, err := Encode(tc.c); !errors.Is(err, tc.want) {
			t.Errorf("Encode(%T): %v, want %v", tc.c, err, tc.want)
		}
	}
	if _, err := Decode(make([]byte, MaxCommandSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized decode: %v", err)
	}
}

func TestResultRoundTrip(t *testing.T) {
	var results []Result
	for _, e := range errorCodes {
		results = append(results, Result{Err: fmt.Errorf("%w: details %d", e.err, e.code), Index: e.code})
	}
	results = append(results,
		Result{},
		Result{Err: errors.New("not a sentinel")},
		Result{Err: &AppError{Msg: "boom"}},
		Result{Index: 8, Shard: ShardRecord{Shard: 9, AvoidOwner: "n1"}, Election: ElectionRecord{Group: "g", Name: "e", Shard: 9, DeclaredAt: -3}},
		Result{Index: 7, Shard: ShardRecord{Shard: 1, Epoch: 2, Owner: "a", OwnerIncarnation: 3, OwnerLiveness: 4, State: ShardRevoking, Target: "b", ChangedAt: -1, Reason: "r"},
			Node: NodeRecord{ID: "a", Incarnation: 3, Liveness: 4, Seq: 5, HeartbeatAt: 6, Draining: true},
			Job: JobRecord{ID: 9, Shard: 1, Key: "k", Type: "t", Payload: []byte("p"), State: JobDead, Attempt: 2, MaxAttempts: 3,
				Owner: "a", Epoch: 2, StartedAt: 1, Timeout: 2, NotBefore: 3, EnqueuedAt: 4, FinishedAt: 5, LastError: "e", Result: []byte("r")},
			Duplicate: true, Response: []byte("resp")},
		Result{Index: 3, Results: []Result{{Err: ErrStaleEpoch}, {Job: JobRecord{ID: 1}}}},
	)
	for _, r := range results {
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Result
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("unmarshal %+v: %v", r, err)
		}
		if (r.Err == nil) != (got.Err == nil) || (r.Err != nil && r.Err.Error() != got.Err.Error()) {
			t.Fatalf("error %v became %v", r.Err, got.Err)
		}
		for _, e := range errorCodes {
			if errors.Is(r.Err, e.err) != errors.Is(got.Err, e.err) {
				t.Fatalf("errors.Is(%v, %v) changed over the wire", r.Err, e.err)
			}
		}
		if r.Err != nil && errors.Is(r.Err, ErrApplication) {
			var ae *AppError
			if !errors.As(got.Err, &ae) {
				t.Fatalf("app error %v decoded as %T", r.Err, got.Err)
			}
		}
		r.Err, got.Err = nil, nil
		for i := range r.Results {
			r.Results[i].Err, got.Results[i].Err = nil, nil
		}
		if !reflect.DeepEqual(r, got) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		for i := range b {
			var x Result
			if err := x.UnmarshalBinary(b[:i]); err == nil {
				t.Fatalf("prefix of %d/%d bytes decoded", i, len(b))
			}
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		f.Add(MustEncode(c))
	}
	f.Add([]byte{Version, byte(KindBatch), 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		b2, err := Encode(c)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", c, err)
		}
		c2, err := Decode(b2)
		if err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("re-encode of %#v: %#v, %v", c, c2, err)
		}
		// Applying whatever decodes must not panic either.
		fsm, _ := newTestFSM(t, DefaultConfig())
		fsm.ApplyCommand(1, c)
	})
}

func FuzzDecodeResult(f *testing.F) {
	r := Result{Err: ErrStaleEpoch, Index: 2, Job: JobRecord{ID: 1, Payload: []byte("x")}, Results: []Result{{Err: ErrConflict}}}
	b, _ := r.MarshalBinary()
	f.Add(b)
	r = Result{Index: 3, Shard: ShardRecord{Shard: 9, AvoidOwner: "n1"}, Election: ElectionRecord{Group: "eu", Name: "x", Shard: 9}, Duplicate: true}
	b, _ = r.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Result
		if err := r.UnmarshalBinary(b); err != nil {
			return
		}
		if _, err := r.MarshalBinary(); err != nil {
			t.Fatalf("decoded result does not encode: %v", err)
		}
	})
}

func FuzzRestore(f *testing.F) {
	fsm, _ := newTestFSM(f, propConfig())
	for i, c := range sampleCommands() {
		fsm.ApplyCommand(uint64(i+1), c)
	}
	f.Add(snapshotBytes(f, fsm))
	f.Fuzz(func(t *testing.T, b []byte) {
		fsm, _ := newTestFSM(t, propConfig())
		_ = fsm.Restore(io.NopCloser(bytes.NewReader(b)))
	})
}

// A version-1 result (before AvoidOwner and Election existed) still
// decodes: the same bytes minus the version-2 fields.
func TestResultVersion1Decodes(t *testing.T) {
	r := Result{Index: 7, Shard: ShardRecord{Shard: 1, Epoch: 2, Owner: "a", State: ShardOwned, Reason: "r"},
		Job: JobRecord{ID: 9}, Response: []byte("resp")}
	w := &writer{}
	w.b = append(w.b, 1)
	w.u(0)
	w.u(r.Index)
	// A version-1 shard record: every field but AvoidOwner.
	s := r.Shard
	w.u(uint64(s.Shard))
	w.u(s.Epoch)
	w.str(s.Owner)
	w.u(s.OwnerIncarnation)
	w.u(s.OwnerLiveness)
	w.u(uint64(s.State))
	w.str(s.Target)
	w.i(s.ChangedAt)
	w.str(s.Reason)
	nodeFields(codec{w: w}, r.Node)
	jobFields(codec{w: w}, r.Job)
	w.bool(r.Duplicate)
	w.bytes(r.Response)
	w.u(0)
	var got Result
	if err := got.UnmarshalBinary(w.b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("version 1 result:\n got %+v\nwant %+v", got, r)
	}
}
