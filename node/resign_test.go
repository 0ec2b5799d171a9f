package node

import (
	"testing"
)

// Resign moves leadership to another node on the real stack: the control
// group does not grant the election straight back to the resigner, and
// does not rebalance it back afterwards.
func TestClusterResignMovesLeadership(t *testing.T) {
	tc := newCluster(t, 3, nil)
	ctx := tc.ctx()
	el := tc.nodes[0].Election("resign-me")
	first, err := el.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := tc.byID(first).Election("resign-me")
	// Acting is time-based (it ends a guard before the lease deadline), so
	// a loaded, descheduled node may stop acting for a moment between two
	// calls: take the token in the same wait that sees it act.
	var tok Token
	if !waitTrue(ctx, func() bool { tok, err = leader.Token(); return err == nil }) {
		t.Fatalf("%s never acts as leader: %v", first, err)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var next string
	if !waitTrue(ctx, func() bool {
		info := tc.nodes[0].Shard(el.Shard())
		next = info.Owner
		return info.Valid && info.Epoch > tok.Epoch
	}) {
		t.Fatal("no new leader after resign")
	}
	if next == first {
		t.Fatalf("leadership went straight back to the resigner %s", first)
	}
	newLeader := tc.byID(next).Election("resign-me")
	if !waitTrue(ctx, newLeader.IsLeader) {
		t.Fatalf("%s never acts as leader", next)
	}
	if leader.IsLeader() {
		t.Fatalf("the resigner %s still acts as leader", first)
	}
	// A second resignation moves it again, to a node other than next.
	var tok2 Token
	if !waitTrue(ctx, func() bool { tok2, err = newLeader.Token(); return err == nil }) {
		t.Fatalf("%s never acts as leader: %v", next, err)
	}
	if err := newLeader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var third string
	if !waitTrue(ctx, func() bool {
		info := tc.nodes[0].Shard(el.Shard())
		third = info.Owner
		return info.Valid && info.Epoch > tok2.Epoch
	}) {
		t.Fatal("no new leader after the second resign")
	}
	if third == next {
		t.Fatalf("leadership went straight back to the resigner %s", next)
	}
	t.Logf("leaders: %s -> %s -> %s", first, next, third)
}
