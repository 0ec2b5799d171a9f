package ledger

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// TestWithRange: adding and removing ranges keeps the table sorted,
// disjoint and merged, and agrees with a per-shard model.
func TestWithRange(t *testing.T) {
	const n = 24
	var rs []ShardRange
	var model [n]bool
	step := uint64(1)
	for i := range 400 {
		step = step*6364136223846793005 + 1442695040888963407
		a, b := uint32(step>>33)%n, uint32(step>>17)%n
		lo, hi := min(a, b), max(a, b)
		fenced := i%3 != 0
		prev := slices.Clone(rs)
		rs = withRange(rs, ShardRange{lo, hi}, fenced)
		for s := lo; s <= hi; s++ {
			model[s] = fenced
		}
		for k, r := range rs {
			if r.First > r.Last || (k > 0 && rs[k-1].Last+1 >= r.First) {
				t.Fatalf("step %d: %v not sorted, disjoint and merged", i, rs)
			}
		}
		for s := range uint32(n) {
			if rangesContain(rs, s) != model[s] {
				t.Fatalf("step %d: shard %d fenced=%v, model %v (%v)", i, s, rangesContain(rs, s), model[s], rs)
			}
		}
		_ = prev
	}
}

// TestSnapshotFencedPolicy: the policy survives a snapshot (version 6); a
// cluster below version 4 without a policy writes version 5 or older,
// which the previous release reads; a corrupt table is refused.
func TestSnapshotFencedPolicy(t *testing.T) {
	f, _ := newTestFSM(t, propConfig())
	applyCmds(t, f,
		Heartbeat{Node: "n1", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: MaxClusterVersion},
		ClusterConfig{Name: "c", Partitions: 8, Version: VersionFencedTakeover - 1, Now: 1})
	if b := snapshotBytes(t, f); b[0] != 5 {
		t.Fatalf("snapshot at cluster version %d has version %d, want 5", VersionFencedTakeover-1, b[0])
	}
	applyCmds(t, f, ClusterConfig{Name: "c", Partitions: 8, Version: VersionFencedTakeover, Now: 1})
	if b := snapshotBytes(t, f); b[0] != snapshotFencedTakeover {
		t.Fatalf("snapshot at cluster version %d has version %d, want %d", VersionFencedTakeover, b[0], snapshotFencedTakeover)
	}
	st := f.State()
	applyCmds(t, f,
		SetTakeoverPolicy{First: 1, Last: 2, Fenced: true, Now: 2},
		SetTakeoverPolicy{First: 5, Last: 7, Fenced: true, Now: 3})
	if len(st.FencedRanges()) != 0 {
		t.Fatalf("copy-on-write: a published State changed to %v", st.FencedRanges())
	}
	b := snapshotBytes(t, f)
	g, _ := newTestFSM(t, propConfig())
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	want := []ShardRange{{1, 2}, {5, 7}}
	if got := g.State().FencedRanges(); !slices.Equal(got, want) {
		t.Fatalf("restored policy %v, want %v", got, want)
	}
	if !g.State().Fenced(6) || g.State().Fenced(3) {
		t.Fatal("Fenced after restore")
	}
	if !bytes.Equal(snapshotBytes(t, g), b) {
		t.Fatal("a restored snapshot encodes differently")
	}
	// The table is followed by the logged-settings flag (0: none logged,
	// logsettings.go) and the application state (one type, "counter"): 2
	// ranges 1..2 and 5..7. Make the second overlap the first.
	bad := slices.Clone(b)
	at := bytes.LastIndex(bad, []byte{2, 1, 2, 5, 7, 0, 1, 7, 'c'})
	if at < 0 {
		t.Fatalf("no fenced table in snapshot %x", bad)
	}
	bad[at+3] = 2 // second range 2..7 overlaps 1..2
	h, _ := newTestFSM(t, propConfig())
	if err := h.Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
		t.Fatal("a snapshot with overlapping fenced ranges was restored")
	}
}

// TestTakeoverPolicyAuthorize: voter-capable nodes (an admin request to
// their API, or an election's fenced option) and operators may propose it;
// a member may not: it waives S4.
func TestTakeoverPolicyAuthorize(t *testing.T) {
	f, _ := newTestFSM(t, propConfig())
	c := SetTakeoverPolicy{First: 1, Last: 1, Fenced: true}
	if err := Authorize(f.State(), Proposer{ID: "n3", Voter: true}, c); err != nil {
		t.Errorf("voter-capable node: %v", err)
	}
	if err := Authorize(f.State(), Proposer{ID: "n3"}, c); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("member: %v, want ErrUnauthorized", err)
	}
	if err := Authorize(f.State(), Proposer{ID: "ops", Operator: true}, c); err != nil {
		t.Errorf("operator: %v", err)
	}
	if err := Authorize(f.State(), Proposer{}, c); err == nil {
		t.Error("anonymous proposer allowed")
	}
}
