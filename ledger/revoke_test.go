package ledger

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func applyOne(f *FSM, c Command) Result {
	idx := f.State().AppliedIndex() + 1
	return f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: MustEncode(c)}).(Result)
}

// TestRevokeNode: the deny-list is gated at VersionRevocation, idempotent,
// refuses the revoked id's heartbeats and claims, matches by id or serial,
// survives a snapshot and is copy-on-write.
func TestRevokeNode(t *testing.T) {
	f, _ := newTestFSM(t, propConfig())
	applyCmds(t, f,
		Heartbeat{Node: "n1", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: MaxClusterVersion},
		Heartbeat{Node: "n2", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: MaxClusterVersion},
		ClusterConfig{Name: "c", Partitions: 8, Version: VersionRevocation - 1, Now: 1})
	if r := applyOne(f, RevokeNode{Node: "n2", Now: 2}); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("RevokeNode below version %d: %v, want ErrVersion", VersionRevocation, r.Err)
	}
	applyCmds(t, f, ClusterConfig{Name: "c", Partitions: 8, Version: VersionRevocation, Now: 1})
	if r := applyOne(f, RevokeNode{Now: 2}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("empty revocation: %v, want ErrInvalid", r.Err)
	}
	st := f.State()
	applyCmds(t, f,
		RevokeNode{Node: "n2", Reason: "stolen laptop", Now: 3},
		RevokeNode{Serial: "0A:FF", Reason: "leaked key", Now: 4})
	if len(st.Revocations()) != 0 {
		t.Fatal("copy-on-write: a published State changed")
	}
	if r := applyOne(f, RevokeNode{Node: "n2", Now: 5}); r.Err != nil || !r.Duplicate {
		t.Fatalf("revoking twice: %+v, want a duplicate", r)
	}
	st = f.State()
	for _, c := range []struct {
		node, serial string
		want         bool
	}{{"n2", "", true}, {"n2", "1", true}, {"n1", "aff", true}, {"n1", NormalizeSerial("0A:FF"), true}, {"n1", "b", false}, {"", "", false}} {
		if _, got := st.Revoked(c.node, c.serial); got != c.want {
			t.Errorf("Revoked(%q, %q) = %v, want %v", c.node, c.serial, got, c.want)
		}
	}
	if r := applyOne(f, Heartbeat{Node: "n2", Incarnation: 1, Now: 6}); !errors.Is(r.Err, ErrRevoked) {
		t.Fatalf("heartbeat of a revoked node: %v, want ErrRevoked", r.Err)
	}
	if r := applyOne(f, Heartbeat{Node: "n2", Incarnation: 2, Now: 6}); !errors.Is(r.Err, ErrRevoked) {
		t.Fatalf("a new incarnation of a revoked node: %v, want ErrRevoked", r.Err)
	}
	applyCmds(t, f, Heartbeat{Node: "n1", Incarnation: 1, Now: 6, MinVersion: 1, MaxVersion: MaxClusterVersion})

	b := snapshotBytes(t, f)
	if b[0] != snapshotRevocation {
		t.Fatalf("snapshot version %d, want %d", b[0], snapshotRevocation)
	}
	g, _ := newTestFSM(t, propConfig())
	restoreBytes(t, g, b)
	if got, want := g.State().Revocations(), f.State().Revocations(); !slices.Equal(got, want) || len(got) != 2 {
		t.Fatalf("restored deny-list %+v, want %+v", got, want)
	}
	if !bytes.Equal(snapshotBytes(t, g), b) {
		t.Fatal("a restored snapshot encodes differently")
	}
	if _, ok := g.State().Revoked("n2", ""); !ok {
		t.Fatal("the restored replica does not refuse n2")
	}
	if _, ok := g.State().Revoked("n9", "aff"); !ok {
		t.Fatal("the restored replica does not refuse serial aff")
	}
	applyCmds(t, f, RevokeNode{Node: "n2", Lift: true, Now: 7}, Heartbeat{Node: "n2", Incarnation: 2, Now: 8, MinVersion: 1, MaxVersion: MaxClusterVersion})
	if _, revoked := f.State().Revoked("n2", ""); revoked {
		t.Fatal("n2 still revoked after the lift")
	}
	if r := applyOne(f, RevokeNode{Node: "n2", Lift: true, Now: 9}); !r.Duplicate {
		t.Fatalf("lifting twice: %+v, want a duplicate", r)
	}
}

func TestNormalizeSerial(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "00": "0", "0A:ff": "aff", "0x1F": "1f", "de ad": "dead"} {
		if got := NormalizeSerial(in); got != want {
			t.Errorf("NormalizeSerial(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkRevoked is the deny-list check every read and write of an
// authenticated connection runs (cluster/identity/revoke.go), on an empty list and
// a full one (MaxRevocations entries, the peer not on it).
func BenchmarkRevoked(b *testing.B) {
	for _, n := range []int{0, MaxRevocations} {
		st := newState(LedgerSettings{})
		var list []Revocation
		for i := range n {
			list = append(list, Revocation{Node: "node-" + itoa(uint64(100000+i)), Serial: itoa(uint64(i))})
		}
		st.setRevoked(list)
		b.Run(itoa(uint64(n)), func(b *testing.B) {
			for b.Loop() {
				if _, ok := st.Revoked("n1", "deadbeef"); ok {
					b.Fatal("revoked")
				}
			}
		})
	}
}
