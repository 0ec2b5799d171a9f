package ledger

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// runVersion commits the cluster config at version v.
func runVersion(t *testing.T, apply func(Command) Result, v uint32) {
	t.Helper()
	if r := apply(ClusterConfig{Name: "c", Partitions: 8, Version: v, Now: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
}

// TestEnqueueCapDecidedByLedger: a JobEnqueue carrying MaxPending is
// refused on a shard that holds that many pending jobs, whoever proposed
// it; a duplicate key is still answered; other shards are not affected;
// and the cap survives the wire (encoding version 7).
func TestEnqueueCapDecidedByLedger(t *testing.T) {
	_, _, apply := sessionFSM(t, DefaultConfig())
	runVersion(t, apply, VersionJobsAPI)
	for i, k := range []string{"a", "b", "c"} {
		if r := apply(JobEnqueue{Shard: 1, Key: k, MaxPending: 3, Now: int64(i + 1)}); r.Err != nil {
			t.Fatalf("enqueue %s under the cap: %v", k, r.Err)
		}
	}
	r := apply(JobEnqueue{Shard: 1, Key: "d", MaxPending: 3, Now: 5})
	if !errors.Is(r.Err, ErrQueueFull) {
		t.Fatalf("fourth pending job with cap 3: %+v, want ErrQueueFull", r)
	}
	if r := apply(JobEnqueue{Shard: 1, Key: "a", MaxPending: 3, Now: 6}); r.Err != nil || !r.Duplicate {
		t.Fatalf("duplicate key on a full shard: %+v, want the existing job", r)
	}
	if r := apply(JobEnqueue{Shard: 2, Key: "d", MaxPending: 3, Now: 7}); r.Err != nil {
		t.Fatalf("another shard: %v", r.Err)
	}
	if r := apply(JobEnqueue{Shard: 1, Key: "e", Now: 8}); r.Err != nil {
		t.Fatalf("no cap in the command: %v", r.Err)
	}
	// The result crosses the wire with its sentinel.
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	full := apply(JobEnqueue{Shard: 1, Key: "f", MaxPending: 2, Now: 9})
	b, _ = full.MarshalBinary()
	if err := back.UnmarshalBinary(b); err != nil || !errors.Is(back.Err, ErrQueueFull) {
		t.Fatalf("ErrQueueFull over the wire: %v / %v", err, back.Err)
	}
	// The command keeps MaxPending through Encode/Decode, in a version 7
	// entry; without it, a version 1 entry as before.
	enc, err := Encode(JobEnqueue{Shard: 1, Key: "g", MaxPending: 9, Now: 1})
	if err != nil {
		t.Fatal(err)
	}
	if enc[0] != encodingJobsAPI {
		t.Fatalf("encoding version %d, want %d", enc[0], encodingJobsAPI)
	}
	c, err := Decode(enc)
	if err != nil || c.(JobEnqueue).MaxPending != 9 {
		t.Fatalf("decode: %+v %v", c, err)
	}
	if enc, _ := Encode(JobEnqueue{Shard: 1, Key: "g", Now: 1}); enc[0] != 1 {
		t.Fatalf("an uncapped enqueue is written as version %d, want 1 (the previous release reads it)", enc[0])
	}
}

// TestRequestIDBoundToBody: from cluster version 5 a request id reused with
// another body — another key, payload, type, shard or command — is refused
// with ErrRequestIDReused and changes nothing; the same body replays,
// whatever its clock or the proposer's cap. Before version 5 the old rule
// holds: the same kind and shard replay the first result.
func TestRequestIDBoundToBody(t *testing.T) {
	f, _, apply := sessionFSM(t, DefaultConfig())
	ownShard(t, apply, 3)
	runVersion(t, apply, VersionJobsAPI)
	id := RequestID{42}
	enq := JobEnqueue{Shard: 3, Key: "k", Type: "t", Payload: []byte("p"), Now: 10}
	first := apply(Session{ID: id, Command: enq})
	if first.Err != nil || first.Duplicate {
		t.Fatalf("first: %+v", first)
	}
	same := enq
	same.Now, same.MaxPending = 20, 100
	if r := apply(Session{ID: id, Command: same}); r.Err != nil || !r.Replayed || r.Job.ID != first.Job.ID || r.Duplicate {
		t.Fatalf("same body, later clock, a cap: %+v, want the first result replayed", r)
	}
	jobs := f.State().NumJobs()
	for name, c := range map[string]Command{
		"another key":     JobEnqueue{Shard: 3, Key: "k2", Type: "t", Payload: []byte("p"), Now: 30},
		"another payload": JobEnqueue{Shard: 3, Key: "k", Type: "t", Payload: []byte("q"), Now: 30},
		"another type":    JobEnqueue{Shard: 3, Key: "k", Type: "u", Payload: []byte("p"), Now: 30},
		"another shard":   JobEnqueue{Shard: 4, Key: "k", Type: "t", Payload: []byte("p"), Now: 30},
		"another command": App{Shard: 3, Epoch: 1, Type: "count", Payload: []byte("p"), Now: 30},
	} {
		if r := apply(Session{ID: id, Command: c}); !errors.Is(r.Err, ErrRequestIDReused) || r.Replayed {
			t.Errorf("%s with a used id: %+v, want ErrRequestIDReused", name, r)
		}
	}
	if got := f.State().NumJobs(); got != jobs {
		t.Fatalf("refused requests changed the jobs: %d → %d", jobs, got)
	}

	// The digest survives a snapshot (version 7).
	snap := snapshotBytes(t, f)
	if snap[0] != snapshotJobsAPI {
		t.Fatalf("snapshot version %d at cluster version 5, want %d", snap[0], snapshotJobsAPI)
	}
	g, _, _ := sessionFSM(t, DefaultConfig())
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, g), snap) {
		t.Fatal("snapshot of the restored state differs")
	}
	if r := g.ApplyCommand(1000, Session{ID: id, Command: JobEnqueue{Shard: 3, Key: "k", Type: "t", Payload: []byte("q"), Now: 40}}); !errors.Is(r.Err, ErrRequestIDReused) {
		t.Fatalf("another body after restore: %+v", r)
	}
}

// TestRequestIDBeforeVersion5: before cluster version 5 a reused id with
// another body of the same kind and shard replays (the old rule, which
// every replica of a mixed cluster applies alike), and snapshots stay at
// version 6 for the previous release.
func TestRequestIDBeforeVersion5(t *testing.T) {
	f, _, apply := sessionFSM(t, DefaultConfig())
	runVersion(t, apply, VersionJobsAPI-1)
	id := RequestID{43}
	first := apply(Session{ID: id, Command: JobEnqueue{Shard: 3, Key: "k", Now: 1}})
	r := apply(Session{ID: id, Command: JobEnqueue{Shard: 3, Key: "other", Now: 2}})
	if r.Err != nil || !r.Replayed || r.Job.ID != first.Job.ID {
		t.Fatalf("version 4: %+v, want the first result replayed", r)
	}
	if snap := snapshotBytes(t, f); snap[0] != 6 {
		t.Fatalf("snapshot version %d at cluster version 4, want 6", snap[0])
	}
}
