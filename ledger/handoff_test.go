package ledger

import (
	"errors"
	"testing"
)

// v5 is the cluster version before the handoff on a word.
const v5 = VersionHandoffWords - 1

// handoffFSM is a replica with n1 and n2 registered and shard 0 granted to
// n1 at epoch 1, then revoked toward n2, running at cluster version v.
func handoffFSM(t *testing.T, v uint32) *FSM {
	t.Helper()
	f, _ := newTestFSM(t, propConfig())
	applyCmds(t, f,
		Heartbeat{Node: "n1", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: MaxClusterVersion},
		Heartbeat{Node: "n2", Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: MaxClusterVersion},
		ClusterConfig{Name: "c", Partitions: 8, Version: v, Now: 1},
		Grant{Shard: 0, ExpectedEpoch: 0, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2},
		Revoke{Shard: 0, Epoch: 1, Target: "n2", Now: 3, Reason: "drain"})
	return f
}

// TestHandoffWordBurn: from VersionHandoffWords a shard revoked toward a
// target that leaves its owner other than by the Transfer burns e+1 (rule
// 2: the next Grant gives e+2, a Release leaves it at e+1); by the
// Transfer it moves to e+1; below the version every path is as before.
// Fails under the no-word-burn mutation.
func TestHandoffWordBurn(t *testing.T) {
	for _, c := range []struct {
		name      string
		v         uint32
		cmds      []Command
		wantEpoch uint64
		wantState ShardState
	}{
		{"transfer v6", VersionHandoffWords, []Command{Transfer{Shard: 0, Epoch: 1, From: "n1", To: "n2", ToIncarnation: 1, ToLiveness: 1, Now: 4}}, 2, ShardOwned},
		{"takeover v6", VersionHandoffWords, []Command{Grant{Shard: 0, ExpectedEpoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, Takeover: true, Now: 4}}, 3, ShardOwned},
		{"expiry then grant v6", VersionHandoffWords, []Command{
			ExpireNode{Node: "n1", Incarnation: 1, Liveness: 1, Seq: 1, Now: 4},
			Grant{Shard: 0, ExpectedEpoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 5}}, 3, ShardOwned},
		{"restart then grant v6", VersionHandoffWords, []Command{
			Heartbeat{Node: "n1", Incarnation: 2, Now: 4, MinVersion: 1, MaxVersion: VersionHandoffWords},
			Grant{Shard: 0, ExpectedEpoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 5}}, 3, ShardOwned},
		{"takeover v5", v5, []Command{Grant{Shard: 0, ExpectedEpoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, Takeover: true, Now: 4}}, 2, ShardOwned},
		{"release v5", v5, []Command{Release{Shard: 0, Epoch: 1, Owner: "n1", Now: 4}}, 1, ShardUnowned},
		{"release then grant v5", v5, []Command{
			Release{Shard: 0, Epoch: 1, Owner: "n1", Now: 4},
			Grant{Shard: 0, ExpectedEpoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 5}}, 2, ShardOwned},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := handoffFSM(t, c.v)
			for _, cmd := range c.cmds {
				if r := applyOne(f, cmd); r.Err != nil {
					t.Fatalf("%T: %v", cmd, r.Err)
				}
			}
			rec, _ := f.State().Shard(0)
			if rec.Epoch != c.wantEpoch || rec.State != c.wantState {
				t.Fatalf("shard 0 at epoch %d (%s), want %d (%s)", rec.Epoch, rec.State, c.wantEpoch, c.wantState)
			}
		})
	}
	// Without a target (the planner decides) nothing is burned: no word
	// can have been spoken.
	if got := HandoffEpoch(ShardRecord{Epoch: 4, State: ShardRevoking}, true, true); got != 5 {
		t.Fatalf("grant of a Revoking shard without a target: epoch %d, want 5", got)
	}
	if got := HandoffEpoch(ShardRecord{Epoch: 4, State: ShardOwned, Target: "n2"}, true, true); got != 5 {
		t.Fatalf("grant of an Owned shard: epoch %d, want 5", got)
	}
}

// TestHandoffRefusals: from VersionHandoffWords a shard Revoking toward a
// target T leaves its owner only by the Transfer to T or the takeover
// grant: a Release (the planner could grant it elsewhere at once, while T
// acts on a word) and a Transfer to another node (it would get e+1, the
// token T may have used) are refused. Below the version both apply.
func TestHandoffRefusals(t *testing.T) {
	release := Release{Shard: 0, Epoch: 1, Owner: "n1", Now: 4, Avoid: true}
	toN3 := Transfer{Shard: 0, Epoch: 1, From: "n1", To: "n3", ToIncarnation: 1, ToLiveness: 1, Now: 4}
	for _, c := range []struct {
		name    string
		v       uint32
		cmd     Command
		refused bool
	}{
		{"release v6", VersionHandoffWords, release, true},
		{"release v5", v5, release, false},
		{"transfer to another v6", VersionHandoffWords, toN3, true},
		{"transfer to another v5", v5, toN3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := handoffFSM(t, c.v)
			if r := applyOne(f, Heartbeat{Node: "n3", Incarnation: 1, Now: 3, MinVersion: 1, MaxVersion: VersionHandoffWords}); r.Err != nil {
				t.Fatal(r.Err)
			}
			r := applyOne(f, c.cmd)
			rec, _ := f.State().Shard(0)
			if c.refused {
				if !errors.Is(r.Err, ErrConflict) || rec.State != ShardRevoking || rec.Epoch != 1 || rec.Owner != "n1" {
					t.Fatalf("%T: err %v, shard %+v; want ErrConflict and shard unchanged", c.cmd, r.Err, rec)
				}
				return
			}
			if r.Err != nil || rec.State == ShardRevoking {
				t.Fatalf("%T below version 6: err %v, shard %+v", c.cmd, r.Err, rec)
			}
		})
	}
}
