package ledger

import (
	"errors"
	"testing"
	"time"
)

// Jobs run on the log's clock once the cluster runs VersionLogTime: the
// proposer's Now no longer decides retention or timeouts. At version 2 the
// same history shows both bugs the log clock fixes (the proposer's clock
// decides), so the test fails if the FSM judged jobs by command Now.
func TestJobsRunOnLogClock(t *testing.T) {
	const sec = int64(time.Second)
	for _, tc := range []struct {
		version uint32
		// at version 2 a node 25 h ahead prunes the key (a retry creates a
		// second job) and a +2 min step restarts the running attempt
		pruned, restarted bool
	}{
		{version: 2, pruned: true, restarted: true},
		{version: VersionLogTime, pruned: false, restarted: false},
	} {
		cfg := DefaultConfig()
		cfg.JobRetention = 24 * time.Hour
		f, err := NewFSM(cfg)
		if err != nil {
			t.Fatal(err)
		}
		base := int64(1_000_000) * sec
		idx := uint64(0)
		apply := func(c Command, at int64) Result {
			idx++
			return f.ApplyCommandAt(idx, c, at)
		}
		must := func(r Result) Result {
			t.Helper()
			if r.Err != nil {
				t.Fatalf("version %d: %v", tc.version, r.Err)
			}
			return r
		}
		must(apply(Heartbeat{Node: "n1", Incarnation: 1, Now: base, MinVersion: 1, MaxVersion: MaxClusterVersion}, base))
		must(apply(ClusterConfig{Name: "c", Partitions: 4, Version: tc.version, Now: base}, base))
		must(apply(Grant{Shard: 0, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, Now: base}, base))
		j := must(apply(JobEnqueue{Shard: 0, Key: "k", Type: "t", Now: base}, base+sec)).Job
		must(apply(JobStart{Shard: 0, Epoch: 1, Owner: "n1", Job: j.ID, Attempt: 0, Now: base}, base+2*sec))
		must(apply(JobComplete{Shard: 0, Epoch: 1, Job: j.ID, Attempt: 1, Now: base}, base+3*sec))
		// A node 25 h ahead enqueues (another key) one second later, then
		// the first key is retried.
		must(apply(JobEnqueue{Shard: 0, Key: "other", Type: "t", Now: base + 25*3600*sec}, base+4*sec))
		r := must(apply(JobEnqueue{Shard: 0, Key: "k", Type: "t", Now: base}, base+5*sec))
		if pruned := !r.Duplicate; pruned != tc.pruned {
			t.Fatalf("version %d: key pruned = %v, want %v (log clock %v)", tc.version, pruned, tc.pruned, f.State().LogTime())
		}

		// A running attempt with a 1 min timeout, started at log time +6 s;
		// a start 10 s later from a node whose clock stepped +2 min.
		j2 := must(apply(JobEnqueue{Shard: 0, Key: "run", Type: "t", Now: base}, base+6*sec)).Job
		must(apply(JobStart{Shard: 0, Epoch: 1, Owner: "n1", Job: j2.ID, Attempt: 0, Timeout: int64(time.Minute), Now: base}, base+6*sec))
		r = apply(JobStart{Shard: 0, Epoch: 1, Owner: "n1", Job: j2.ID, Attempt: 1, Timeout: int64(time.Minute), Now: base + 120*sec}, base+16*sec)
		restarted := r.Err == nil
		if !restarted && !errors.Is(r.Err, ErrJobState) {
			t.Fatalf("version %d: second start: %v", tc.version, r.Err)
		}
		if restarted != tc.restarted {
			t.Fatalf("version %d: running attempt restarted = %v, want %v (%v)", tc.version, restarted, tc.restarted, r.Err)
		}
	}
}

// The log's clock never goes back (a new leader's clock may be behind) and
// survives a snapshot; a cluster not yet at VersionLogTime writes the
// previous snapshot version.
func TestLogClockMonotonicAndSnapshot(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyCommandAt(1, Heartbeat{Node: "n1", Incarnation: 1, MinVersion: 1, MaxVersion: MaxClusterVersion}, 50)
	if got := f.State().LogTime(); got != 0 {
		t.Fatalf("log clock %d before VersionLogTime", got)
	}
	if b := snapshotBytes(t, f); b[0] != 4 {
		t.Fatalf("snapshot version %d before VersionLogTime, want 4", b[0])
	}
	f.ApplyCommandAt(2, ClusterConfig{Name: "c", Partitions: 4, Version: VersionLogTime}, 100)
	f.ApplyCommandAt(3, Heartbeat{Node: "n1", Incarnation: 1, MinVersion: 1, MaxVersion: MaxClusterVersion}, 200)
	f.ApplyCommandAt(4, Heartbeat{Node: "n1", Incarnation: 1, MinVersion: 1, MaxVersion: MaxClusterVersion}, 150)
	if got := f.State().LogTime(); got != 200 {
		t.Fatalf("log clock %d, want 200 (max so far)", got)
	}
	b := snapshotBytes(t, f)
	if b[0] != 5 {
		t.Fatalf("snapshot version %d at VersionLogTime, want 5", b[0])
	}
	st, _, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.LogTime() != 200 {
		t.Fatalf("restored log clock %d, want 200", st.LogTime())
	}
}
