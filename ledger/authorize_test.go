package ledger

import (
	"errors"
	"testing"
)

// The authorization rule, command by command: a member proposes only what
// concerns itself, the leader alone grants, operators drain and configure.
func TestAuthorize(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	apply := func(c Command) {
		t.Helper()
		idx++
		if r := f.ApplyCommand(idx, c); r.Err != nil {
			t.Fatalf("setup %T: %v", c, r.Err)
		}
	}
	apply(Heartbeat{Node: "a", Incarnation: 1, Now: 1})
	apply(Heartbeat{Node: "b", Incarnation: 1, Now: 1})
	apply(Grant{Shard: 5, ExpectedEpoch: 0, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
	st := f.State()
	rec, _ := st.Shard(5)
	ep := rec.Epoch

	a := Proposer{ID: "a"}
	b := Proposer{ID: "b"}
	op := Proposer{ID: "ops", Operator: true}
	for _, tc := range []struct {
		name string
		p    Proposer
		c    Command
		ok   bool
	}{
		{"own heartbeat", a, Heartbeat{Node: "a", Incarnation: 2}, true},
		{"heartbeat for another (lock-out at 2^64-1)", b, Heartbeat{Node: "a", Incarnation: ^uint64(0)}, false},
		{"anonymous", Proposer{}, JobEnqueue{Shard: 1}, false},
		{"grant", a, Grant{Shard: 6, Owner: "a"}, false},
		{"revoke", a, Revoke{Shard: 5, Epoch: ep}, false},
		{"expire", a, ExpireNode{Node: "b"}, false},
		{"operator grant", op, Grant{Shard: 6, Owner: "a"}, false},
		{"own drain", a, SetDraining{Node: "a", Draining: true}, true},
		{"drain another", a, SetDraining{Node: "b", Draining: true}, false},
		{"operator drains another", op, SetDraining{Node: "b", Draining: true}, true},
		{"owner releases", a, Release{Shard: 5, Epoch: ep, Owner: "a"}, true},
		{"release as another", b, Release{Shard: 5, Epoch: ep, Owner: "a"}, false},
		{"owner transfers", a, Transfer{Shard: 5, Epoch: ep, From: "a", To: "b"}, true},
		{"transfer to self as another", b, Transfer{Shard: 5, Epoch: ep, From: "a", To: "b"}, false},
		{"enqueue anywhere", b, JobEnqueue{Shard: 5, Type: "t"}, true},
		{"operator enqueue", op, JobEnqueue{Shard: 5, Type: "t"}, true},
		{"declare election", b, DeclareElection{Group: "g", Name: "e"}, true},
		{"start as owner", a, JobStart{Shard: 5, Epoch: ep, Owner: "a", Job: 1}, true},
		{"start as another", b, JobStart{Shard: 5, Epoch: ep, Owner: "a", Job: 1}, false},
		{"complete at own epoch", a, JobComplete{Shard: 5, Epoch: ep, Job: 1}, true},
		{"forged completion at owner's epoch", b, JobComplete{Shard: 5, Epoch: ep, Job: 1}, false},
		{"fail at owner's epoch", b, JobFail{Shard: 5, Epoch: ep, Job: 1}, false},
		{"app at owner's epoch", b, App{Shard: 5, Epoch: ep, Type: "x"}, false},
		{"app at own epoch", a, App{Shard: 5, Epoch: ep, Type: "x"}, true},
		{"stale epoch left to the FSM", b, JobComplete{Shard: 5, Epoch: ep - 1, Job: 1}, true},
		{"epoch not committed", a, JobComplete{Shard: 5, Epoch: ep + 1, Job: 1}, false},
		{"never granted shard", a, App{Shard: 99, Epoch: 1, Type: "x"}, false},
		{"operator app", op, App{Shard: 5, Epoch: ep, Type: "x"}, false},
		{"settings", a, Settings{MaxFinishedJobs: 1}, false},
		{"operator settings", op, Settings{MaxFinishedJobs: 1}, true},
		{"batch of own", a, Batch{Commands: []Command{Heartbeat{Node: "a"}, JobComplete{Shard: 5, Epoch: ep}}}, true},
		{"batch hiding a forgery", b, Batch{Commands: []Command{Heartbeat{Node: "b"}, Heartbeat{Node: "a"}}}, false},
	} {
		err := Authorize(st, tc.p, tc.c)
		if tc.ok && err != nil {
			t.Errorf("%s: %v, want allowed", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: err = %v, want ErrUnauthorized", tc.name, err)
		}
	}
}
