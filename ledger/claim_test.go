package ledger

import (
	"errors"
	"testing"
)

// TestClaimIncarnation: before cluster version 3 a claim is refused with
// ErrVersion and changes nothing; afterwards every claim registers the
// node one incarnation above its record with the liveness epoch moved on,
// so the previous incarnation's grants die and two claims never share an
// incarnation; a heartbeat of an older incarnation is then stale.
func TestClaimIncarnation(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	apply := func(c Command) Result {
		idx++
		return f.ApplyCommand(idx, c)
	}
	claim := ClaimIncarnation{Node: "m1", Now: 10, MinVersion: 1, MaxVersion: MaxClusterVersion}
	if r := apply(claim); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("claim before any cluster config: %v, want ErrVersion", r.Err)
	}
	if r := apply(ClusterConfig{Name: "c", Partitions: 4, Version: 2}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(claim); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("claim at version 2: %v, want ErrVersion", r.Err)
	}
	if _, ok := f.State().Node("m1"); ok {
		t.Fatal("a refused claim registered the node")
	}
	if r := apply(ClusterConfig{Name: "c", Partitions: 4, Version: VersionDisklessMembers}); r.Err != nil {
		t.Fatal(r.Err)
	}

	r := apply(claim)
	if r.Err != nil || r.Node.Incarnation != 1 || r.Node.Liveness != 1 {
		t.Fatalf("first claim: %+v", r)
	}
	// The claiming process heartbeats at its incarnation: a renewal.
	hb := Heartbeat{Node: "m1", Incarnation: r.Node.Incarnation, Liveness: r.Node.Liveness, Now: 11, MinVersion: 1, MaxVersion: MaxClusterVersion}
	if r := apply(hb); r.Err != nil || r.Node.Seq != 2 {
		t.Fatalf("heartbeat after the claim: %+v", r)
	}
	if r := apply(Grant{Shard: 0, Owner: "m1", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 12}); r.Err != nil {
		t.Fatal(r.Err)
	}
	// A restart: the next claim is incarnation 2, liveness 2; the grant of
	// incarnation 1 is no longer valid and its heartbeats are stale.
	r2 := apply(ClaimIncarnation{Node: "m1", Now: 20, MinVersion: 1, MaxVersion: MaxClusterVersion})
	if r2.Err != nil || r2.Node.Incarnation != 2 || r2.Node.Liveness != 2 {
		t.Fatalf("second claim: %+v", r2)
	}
	if rec, _ := f.State().Shard(0); f.State().OwnershipValid(rec) {
		t.Fatalf("shard 0 still validly owned by the earlier incarnation: %+v", rec)
	}
	if r := apply(hb); !errors.Is(r.Err, ErrStaleIncarnation) {
		t.Fatalf("heartbeat of the earlier incarnation: %v, want ErrStaleIncarnation", r.Err)
	}
	// A node with a data dir that registered at incarnation 7 and then
	// lost it: the claim goes above 7.
	if r := apply(Heartbeat{Node: "m2", Incarnation: 7, Now: 21, MinVersion: 1, MaxVersion: MaxClusterVersion}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(ClaimIncarnation{Node: "m2", Now: 22, MinVersion: 1, MaxVersion: MaxClusterVersion}); r.Err != nil || r.Node.Incarnation != 8 {
		t.Fatalf("claim above a registered incarnation: %+v", r)
	}
	// A binary that cannot run at the active version is refused.
	if r := apply(ClaimIncarnation{Node: "m3", Now: 23, MinVersion: 1, MaxVersion: 2}); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("claim from a version-2 binary: %v, want ErrVersion", r.Err)
	}
	if r := apply(ClaimIncarnation{Now: 24}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("claim without node: %v, want ErrInvalid", r.Err)
	}
}

// TestClaimIncarnationAuthorize: a member claims only its own id.
func TestClaimIncarnationAuthorize(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	st := f.State()
	if err := Authorize(st, Proposer{ID: "m1"}, ClaimIncarnation{Node: "m1"}); err != nil {
		t.Fatalf("own claim refused: %v", err)
	}
	if err := Authorize(st, Proposer{ID: "m1"}, ClaimIncarnation{Node: "m2"}); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("claim for another node: %v, want ErrUnauthorized", err)
	}
}
