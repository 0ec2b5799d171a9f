package ledger

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// TestClusterConfig: the first ClusterConfig records name and partitions;
// they never change, the version never goes down, a repeat is a duplicate.
func TestClusterConfig(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if v := f.State().ActiveVersion(); v != 1 {
		t.Fatalf("active version before any config: %d, want 1", v)
	}
	idx := uint64(0)
	apply := func(c Command) Result {
		idx++
		return f.ApplyCommand(idx, c)
	}
	for _, tc := range []struct {
		c    ClusterConfig
		err  error
		dup  bool
		want ClusterInfo
	}{
		{ClusterConfig{Name: "", Partitions: 8, Version: 1}, ErrInvalid, false, ClusterInfo{}},
		{ClusterConfig{Name: "c", Partitions: 0, Version: 1}, ErrInvalid, false, ClusterInfo{}},
		{ClusterConfig{Name: "c", Partitions: 8, Version: 0}, ErrInvalid, false, ClusterInfo{}},
		{ClusterConfig{Name: "c", Partitions: 8, Version: 1, Now: 5}, nil, false, ClusterInfo{"c", 8, 1, 5}},
		{ClusterConfig{Name: "c", Partitions: 8, Version: 1, Now: 6}, nil, true, ClusterInfo{"c", 8, 1, 5}},
		{ClusterConfig{Name: "d", Partitions: 8, Version: 1}, ErrInvalid, false, ClusterInfo{"c", 8, 1, 5}},
		{ClusterConfig{Name: "c", Partitions: 16, Version: 1}, ErrInvalid, false, ClusterInfo{"c", 8, 1, 5}},
		{ClusterConfig{Name: "c", Partitions: 8, Version: 2, Now: 7}, nil, false, ClusterInfo{"c", 8, 2, 7}},
		{ClusterConfig{Name: "c", Partitions: 8, Version: 1}, ErrInvalid, false, ClusterInfo{"c", 8, 2, 7}},
	} {
		r := apply(tc.c)
		if (tc.err == nil) != (r.Err == nil) || (tc.err != nil && !errors.Is(r.Err, tc.err)) || r.Duplicate != tc.dup {
			t.Errorf("%+v: %v dup=%v, want %v dup=%v", tc.c, r.Err, r.Duplicate, tc.err, tc.dup)
		}
		if got := f.State().Cluster(); got != tc.want {
			t.Errorf("%+v: cluster %+v, want %+v", tc.c, got, tc.want)
		}
	}
	if !f.State().VersionActive(2) || f.State().VersionActive(3) {
		t.Error("VersionActive disagrees with version 2")
	}
}

// TestHeartbeatVersionRange: a heartbeat from a binary that cannot run at
// the active version is refused; the range is recorded and survives a
// snapshot; an old binary's heartbeat (no range) speaks version 1.
func TestHeartbeatVersionRange(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	apply := func(c Command) Result {
		idx++
		return f.ApplyCommand(idx, c)
	}
	if r := apply(Heartbeat{Node: "old", Incarnation: 1, Now: 1}); r.Err != nil {
		t.Fatalf("legacy heartbeat at version 1: %v", r.Err)
	}
	if r := apply(Heartbeat{Node: "new", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: 2}); r.Err != nil {
		t.Fatalf("heartbeat 1..2 at version 1: %v", r.Err)
	}
	if r := apply(Heartbeat{Node: "future", Incarnation: 1, Now: 1, MinVersion: 2, MaxVersion: 3}); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("heartbeat 2..3 at version 1: %v, want ErrVersion", r.Err)
	}
	apply(ClusterConfig{Name: "c", Partitions: 4, Version: 2})
	if r := apply(Heartbeat{Node: "old", Incarnation: 1, Now: 2}); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("legacy heartbeat at version 2: %v, want ErrVersion", r.Err)
	}
	if r := apply(Heartbeat{Node: "new", Incarnation: 1, Now: 2, MinVersion: 1, MaxVersion: 2}); r.Err != nil {
		t.Fatalf("heartbeat 1..2 at version 2: %v", r.Err)
	}
	n, _ := f.State().Node("new")
	if lo, hi := n.SpeakRange(); lo != 1 || hi != 2 {
		t.Fatalf("recorded range %d..%d, want 1..2", lo, hi)
	}

	// Snapshot round trip keeps the cluster config and the ranges.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.(*fsmSnapshot).writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	g, _ := NewFSM(DefaultConfig())
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if got := g.State().Cluster(); got != f.State().Cluster() {
		t.Errorf("restored cluster %+v, want %+v", got, f.State().Cluster())
	}
	if n2, _ := g.State().Node("new"); n2 != n {
		t.Errorf("restored node %+v, want %+v", n2, n)
	}
}

// TestClusterVersionBeyondBinaryHalts: a committed ClusterConfig raising
// the version past what this binary speaks halts the replica there.
func TestClusterVersionBeyondBinaryHalts(t *testing.T) {
	f, _ := NewFSM(DefaultConfig())
	b := MustEncode(ClusterConfig{Name: "c", Partitions: 4, Version: MaxClusterVersion + 1})
	out := f.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: b}})
	if r := out[0].(Result); !errors.Is(r.Err, ErrHalted) || !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("result %v, want ErrHalted and ErrVersion", r.Err)
	}
	if h, ok := f.HaltedAt(); !ok || h.Index != 1 {
		t.Fatalf("HaltedAt %+v %v", h, ok)
	}
	if f.State().Cluster().Version != 0 {
		t.Fatal("the unreadable config was applied")
	}
}

// TestEncodeVersions: commands without the new fields keep their old
// encoding version (nodes of the previous release read them).
func TestEncodeVersions(t *testing.T) {
	for _, tc := range []struct {
		c    Command
		want byte
	}{
		{Heartbeat{Node: "a", Incarnation: 1}, 1},
		{Heartbeat{Node: "a", Incarnation: 1, MinVersion: 1, MaxVersion: 1}, 3},
		{ClusterConfig{Name: "c", Partitions: 1, Version: 1}, 3},
		{Batch{Commands: []Command{Heartbeat{Node: "a"}, ClusterConfig{Name: "c", Partitions: 1, Version: 1}}}, 3},
	} {
		b := MustEncode(tc.c)
		if b[0] != tc.want {
			t.Errorf("%T encoded at version %d, want %d", tc.c, b[0], tc.want)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", tc.c, err)
		}
		if !bytes.Equal(MustEncode(got), b) {
			t.Errorf("%T does not round-trip", tc.c)
		}
	}
}
