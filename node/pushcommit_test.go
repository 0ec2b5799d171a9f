package node

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/ledger"
)

// Only an applied Grant, Transfer or Revoke makes the leader push the
// commit index (cluster.ControlGroup.PushCommit): a refused one changed
// nothing, and other commands have no owner waiting to apply them.
func TestHandsOver(t *testing.T) {
	refused := ledger.Result{Err: errors.New("stale epoch")}
	for _, tc := range []struct {
		c    ledger.Command
		r    ledger.Result
		want bool
	}{
		{ledger.Grant{Shard: 1, Owner: "n2"}, ledger.Result{}, true},
		{ledger.Transfer{Shard: 1, From: "n1", To: "n2"}, ledger.Result{}, true},
		{ledger.Grant{Shard: 1, Owner: "n2"}, refused, false},
		{ledger.Transfer{Shard: 1, From: "n1", To: "n2"}, refused, false},
		{ledger.Release{Shard: 1, Owner: "n1"}, ledger.Result{}, false},
		{ledger.Revoke{Shard: 1, Target: "n2"}, ledger.Result{}, true},
		{ledger.Revoke{Shard: 1, Target: "n2"}, refused, false},
		{ledger.Heartbeat{Node: "n1"}, ledger.Result{}, false},
	} {
		if got := handsOver(tc.c, tc.r); got != tc.want {
			t.Errorf("handsOver(%T, err %v) = %v, want %v", tc.c, tc.r.Err, got, tc.want)
		}
	}
}

// The commit push (cluster.ControlConfig.PushCommand) is an empty Batch:
// encoded at the ledger's oldest encoding version, so every release reads
// it, and applied as a no-op that still advances the replica's applied
// index — what a renewal's acknowledgement waits for.
func TestPushCommandIsNoop(t *testing.T) {
	b, err := ledger.Encode(ledger.Batch{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ledger.Decode(b)
	if err != nil {
		t.Fatalf("decode the push: %v", err)
	}
	if bc, ok := c.(ledger.Batch); !ok || len(bc.Commands) != 0 {
		t.Fatalf("push decodes to %#v, want an empty Batch", c)
	}
	f, err := ledger.NewFSM(ledger.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyCommand(1, ledger.Heartbeat{Node: "n1", Incarnation: 1})
	before := f.State()
	var hooked int
	f.OnApply(func(uint64, ledger.Command, ledger.Result) { hooked++ })
	res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: b})
	if r, ok := res.(ledger.Result); !ok || r.Err != nil {
		t.Fatalf("apply the push: %#v", res)
	}
	after := f.State()
	if after.AppliedIndex() != 2 {
		t.Fatalf("applied index after the push = %d, want 2", after.AppliedIndex())
	}
	if hooked != 0 || len(after.Nodes()) != len(before.Nodes()) || len(after.Shards()) != len(before.Shards()) {
		t.Fatalf("the push changed the state: hooks %d, nodes %d→%d, shards %d→%d",
			hooked, len(before.Nodes()), len(after.Nodes()), len(before.Shards()), len(after.Shards()))
	}
}
