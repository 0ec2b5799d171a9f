package ledger

import (
	"errors"
	"testing"
)

// TestForgetNode: the leader's ForgetNode removes an expired node's record
// only at cluster version 4, only at the record it saw, only once no shard
// names the node; a process of the id that claims afterwards gets the
// claim's log index, above the forgotten incarnation.
func TestForgetNode(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	index := uint64(0)
	apply := func(c Command) Result {
		t.Helper()
		index++
		data, err := Encode(c)
		if err != nil {
			t.Fatalf("encode %T: %v", c, err)
		}
		back, err := Decode(data)
		if err != nil {
			t.Fatalf("decode %T: %v", c, err)
		}
		return f.ApplyCommand(index, back)
	}
	must := func(c Command) Result {
		t.Helper()
		r := apply(c)
		if r.Err != nil {
			t.Fatalf("%T: %v", c, r.Err)
		}
		return r
	}
	must(ClusterConfig{Name: "c", Partitions: 8, Version: 3, Now: 1})
	m := must(ClaimIncarnation{Node: "m", Now: 2, MinVersion: 1, MaxVersion: MaxClusterVersion}).Node
	must(Grant{Shard: 1, Owner: "m", OwnerIncarnation: m.Incarnation, OwnerLiveness: m.Liveness, Now: 3})
	m = must(ExpireNode{Node: "m", Incarnation: m.Incarnation, Liveness: m.Liveness, Seq: m.Seq, Now: 4}).Node
	forget := ForgetNode{Node: "m", Incarnation: m.Incarnation, Liveness: m.Liveness, Seq: m.Seq, Now: 5}

	if r := apply(forget); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("forget at version 3: %v, want ErrVersion", r.Err)
	}
	must(ClusterConfig{Name: "c", Partitions: 8, Version: VersionForgetNodes, Now: 6})
	if r := apply(forget); !errors.Is(r.Err, ErrConflict) || r.Shard.Shard != 1 {
		t.Fatalf("forget while shard 1 names it: %v (shard %d), want ErrConflict", r.Err, r.Shard.Shard)
	}
	stale := forget
	stale.Seq--
	if r := apply(stale); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("forget at an older seq: %v, want ErrConflict", r.Err)
	}
	o := must(Heartbeat{Node: "other", Incarnation: 1, Now: 7, MinVersion: 1, MaxVersion: MaxClusterVersion}).Node
	must(Grant{Shard: 1, ExpectedEpoch: 1, Owner: "other", OwnerIncarnation: o.Incarnation, OwnerLiveness: o.Liveness, Now: 7}) // m's grant is invalid: regranted
	must(forget)
	if _, ok := f.State().Node("m"); ok {
		t.Fatal("m's record is still there")
	}
	if r := apply(forget); !errors.Is(r.Err, ErrUnknownNode) {
		t.Fatalf("forget twice: %v, want ErrUnknownNode", r.Err)
	}
	r := must(ClaimIncarnation{Node: "m", Now: 8, MinVersion: 1, MaxVersion: MaxClusterVersion})
	if r.Node.Incarnation != index || r.Node.Incarnation <= m.Incarnation {
		t.Fatalf("claim after the forget: incarnation %d, want the claim's index %d (> %d)", r.Node.Incarnation, index, m.Incarnation)
	}
	// A known id still takes the next number.
	if r2 := must(ClaimIncarnation{Node: "m", Now: 9, MinVersion: 1, MaxVersion: MaxClusterVersion}); r2.Node.Incarnation != r.Node.Incarnation+1 {
		t.Fatalf("second claim: %d, want %d", r2.Node.Incarnation, r.Node.Incarnation+1)
	}
}

// TestForgetNodeIncarnationBelowIndex: a record whose incarnation a later
// claim's index might not exceed (a node with a disk counting its own) is
// never forgotten.
func TestForgetNodeIncarnationBelowIndex(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyCommand(1, ClusterConfig{Name: "c", Partitions: 8, Version: VersionForgetNodes, Now: 1})
	n := f.ApplyCommand(2, Heartbeat{Node: "d", Incarnation: 50, Now: 2, MinVersion: 1, MaxVersion: MaxClusterVersion}).Node
	n = f.ApplyCommand(3, ExpireNode{Node: "d", Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq, Now: 3}).Node
	r := f.ApplyCommand(4, ForgetNode{Node: "d", Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq, Now: 4})
	if !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("forget incarnation 50 at index 4: %v, want ErrConflict", r.Err)
	}
}
