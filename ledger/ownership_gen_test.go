package ledger

import "testing"

// TestOwnershipGeneration: the number moves when a shard record or a
// node's incarnation or liveness changes, and stays put for a heartbeat
// or a draining flag, which leave every shard's owner and validity alone.
func TestOwnershipGeneration(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	index := uint64(0)
	step := func(c Command, wantMoved bool) {
		t.Helper()
		before := f.State().OwnershipGeneration()
		index++
		if r := f.ApplyCommand(index, c); r.Err != nil {
			t.Fatalf("%T: %v", c, r.Err)
		}
		after := f.State().OwnershipGeneration()
		if after == 0 {
			t.Fatalf("%T: generation 0", c)
		}
		if moved := after != before; moved != wantMoved {
			t.Fatalf("%T: generation %d → %d, want moved=%v", c, before, after, wantMoved)
		}
	}
	step(Heartbeat{Node: "a", Incarnation: 1, Now: 1}, true) // a new node
	step(Heartbeat{Node: "a", Incarnation: 1, Liveness: 1, Now: 2}, false)
	step(Grant{Shard: 5, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 3}, true)
	step(Heartbeat{Node: "a", Incarnation: 1, Liveness: 1, Now: 4}, false)
	step(SetDraining{Node: "a", Incarnation: 1, Draining: true}, false)
	step(ExpireNode{Node: "a", Incarnation: 1, Liveness: 1, Seq: 3, Now: 5}, true)
	step(Heartbeat{Node: "a", Incarnation: 2, Now: 6}, true) // a restart
}
