package ledger

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func applyCmds(t *testing.T, f *FSM, cmds ...Command) {
	t.Helper()
	for _, c := range cmds {
		idx := f.State().AppliedIndex() + 1
		r := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: MustEncode(c)}).(Result)
		if r.Err != nil {
			t.Fatalf("%T: %v", c, r.Err)
		}
	}
}

// TestSnapshotPlacementRules: pins and exclusions survive a snapshot
// (version 5); a cluster that has not finalized version 3 writes version
// 4, which the previous release reads.
func TestSnapshotPlacementRules(t *testing.T) {
	f, _ := newTestFSM(t, propConfig())
	applyCmds(t, f,
		Heartbeat{Node: "n1", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: MaxClusterVersion},
		ClusterConfig{Name: "c", Partitions: 8, Version: VersionPlacementRules - 1, Now: 1})
	if b := snapshotBytes(t, f); b[0] != 4 {
		t.Fatalf("snapshot at cluster version %d has version %d, want 4", VersionPlacementRules-1, b[0])
	}
	applyCmds(t, f, ClusterConfig{Name: "c", Partitions: 8, Version: VersionPlacementRules, Now: 1})
	applyCmds(t, f,
		PinShard{Shard: 3, Node: "n1", Reason: "hot", Now: 2},
		PinShard{Shard: 5, Node: "n1", Now: 3},
		ExcludeNode{Node: "n2", Exclude: true, Reason: "disk", Now: 4})
	b := snapshotBytes(t, f)
	if b[0] != 5 {
		t.Fatalf("snapshot with rules has version %d, want 5", b[0])
	}
	g, _ := newTestFSM(t, propConfig())
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.State().Pins(), f.State().Pins()) || !slices.Equal(g.State().Excluded(), f.State().Excluded()) {
		t.Fatalf("restored rules %v %v, want %v %v", g.State().Pins(), g.State().Excluded(), f.State().Pins(), f.State().Excluded())
	}
	if !bytes.Equal(snapshotBytes(t, g), b) {
		t.Fatal("a restored snapshot encodes differently")
	}
	if !g.State().IsExcluded("n2") || g.State().IsExcluded("n1") {
		t.Fatal("IsExcluded after restore")
	}
	// A published State does not change under later commands.
	st := f.State()
	applyCmds(t, f, PinShard{Shard: 3, Now: 5}, ExcludeNode{Node: "n2", Now: 6})
	if len(st.Pins()) != 2 || len(st.Excluded()) != 1 || len(f.State().Pins()) != 1 || len(f.State().Excluded()) != 0 {
		t.Fatalf("copy-on-write: old %v %v, new %v %v", st.Pins(), st.Excluded(), f.State().Pins(), f.State().Excluded())
	}
}

// TestPlacementRulesAuthorize: voter-capable nodes (whose HTTP API checked
// an admin token) and operators may propose pins and exclusions; a member
// may not (TestAuthorizeTable has the whole rule).
func TestPlacementRulesAuthorize(t *testing.T) {
	f, _ := newTestFSM(t, propConfig())
	for _, c := range []Command{PinShard{Shard: 1, Node: "n1"}, ExcludeNode{Node: "n2", Exclude: true}} {
		if err := Authorize(f.State(), Proposer{ID: "n3", Voter: true}, c); err != nil {
			t.Errorf("voter-capable node proposing %T: %v", c, err)
		}
		if err := Authorize(f.State(), Proposer{ID: "n3"}, c); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("member proposing %T: %v, want ErrUnauthorized", c, err)
		}
		if err := Authorize(f.State(), Proposer{ID: "ops", Operator: true}, c); err != nil {
			t.Errorf("operator proposing %T: %v", c, err)
		}
	}
}
