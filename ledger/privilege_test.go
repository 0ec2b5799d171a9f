package ledger

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// privilegeState is a cluster at version 4 with members a and b, each
// owning one shard (a: 5, b: 6), and a voter-capable node v.
func privilegeState(t *testing.T, version uint32) (*FSM, map[string]uint32, map[uint32]uint64) {
	t.Helper()
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
	for _, n := range []string{"a", "b", "v"} {
		apply(Heartbeat{Node: n, Incarnation: 1, Now: 1, MinVersion: 1, MaxVersion: version})
	}
	apply(ClusterConfig{Name: "c", Partitions: 8, Version: version, Now: 1})
	shardOf := map[string]uint32{"a": 5, "b": 6}
	epochs := map[uint32]uint64{}
	for n, s := range shardOf {
		apply(Grant{Shard: s, ExpectedEpoch: 0, Owner: n, OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
		rec, _ := f.State().Shard(s)
		epochs[s] = rec.Epoch
	}
	return f, shardOf, epochs
}

// TestAuthorizeTable walks every command kind this build knows × who
// proposes it: a member about itself, a member about another node, a
// voter-capable node about another node, an operator. A kind without a
// row here, without a rule in its declaration (registry.go) or without a row in the table of
// docs/security.md fails the test.
func TestAuthorizeTable(t *testing.T) {
	f, shardOf, epochs := privilegeState(t, MaxClusterVersion)
	st := f.State()
	sh := func(w string) uint32 { return shardOf[w] }
	ep := func(w string) uint64 { return epochs[shardOf[w]] }
	type row struct {
		cmd func(who string) Command // the command about node who
		// allowed for: member a about a, member a about b, voter v
		// about b, operator ops about b.
		self, other, voter, operator bool
	}
	rows := map[Kind]row{
		KindHeartbeat:        {func(w string) Command { return Heartbeat{Node: w, Incarnation: 1} }, true, false, false, false},
		KindClaimIncarnation: {func(w string) Command { return ClaimIncarnation{Node: w} }, true, false, false, false},
		KindSetDraining:      {func(w string) Command { return SetDraining{Node: w, Draining: true} }, true, false, true, true},
		KindRelease:          {func(w string) Command { return Release{Shard: sh(w), Epoch: ep(w), Owner: w} }, true, false, false, false},
		KindTransfer:         {func(w string) Command { return Transfer{Shard: sh(w), Epoch: ep(w), From: w, To: "v"} }, true, false, false, false},
		KindJobStart:         {func(w string) Command { return JobStart{Shard: sh(w), Epoch: ep(w), Owner: w, Job: 1} }, true, false, false, false},
		KindJobComplete:      {func(w string) Command { return JobComplete{Shard: sh(w), Epoch: ep(w), Job: 1} }, true, false, false, false},
		KindJobFail:          {func(w string) Command { return JobFail{Shard: sh(w), Epoch: ep(w), Job: 1} }, true, false, false, false},
		KindApp:              {func(w string) Command { return App{Shard: sh(w), Epoch: ep(w), Type: "x"} }, true, false, false, false},
		KindJobEnqueue:       {func(w string) Command { return JobEnqueue{Shard: sh(w), Type: "t"} }, true, true, true, true},
		KindDeclareElection:  {func(w string) Command { return DeclareElection{Group: w, Name: "e"} }, true, true, true, true},
		KindPinShard:         {func(w string) Command { return PinShard{Shard: 1, Node: w} }, false, false, true, true},
		KindExcludeNode:      {func(w string) Command { return ExcludeNode{Node: w, Exclude: true} }, false, false, true, true},
		KindSetTakeoverPolicy: {func(w string) Command { return SetTakeoverPolicy{First: sh(w), Last: sh(w), Fenced: true} },
			false, false, true, true},
		KindForgetNode:    {func(w string) Command { return ForgetNode{Node: w, Incarnation: 1} }, false, false, true, true},
		KindSettings:      {func(string) Command { return Settings{MaxFinishedJobs: 1} }, false, false, true, true},
		KindLogSettings:   {func(string) Command { return LogSettings{} }, false, false, true, true},
		KindClusterConfig: {func(string) Command { return ClusterConfig{Name: "c", Partitions: 8, Version: MaxClusterVersion} }, false, false, true, true},
		KindGrant:         {func(w string) Command { return Grant{Shard: 7, Owner: w} }, false, false, false, false},
		KindRevoke:        {func(w string) Command { return Revoke{Shard: sh(w), Epoch: ep(w)} }, false, false, false, false},
		KindExpireNode:    {func(w string) Command { return ExpireNode{Node: w} }, false, false, false, false},
		KindSession: {func(w string) Command { return Session{ID: RequestID{1}, Command: Heartbeat{Node: w, Incarnation: 1}} },
			true, false, false, false},
		KindBatch: {func(w string) Command {
			return Batch{Commands: []Command{Heartbeat{Node: w, Incarnation: 1}, JobEnqueue{Shard: 1}}}
		},
			true, false, false, false},
	}
	docs, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := Kind(0); k < 255; k++ {
		if strings.HasPrefix(k.String(), "Kind(") {
			continue // not a kind this build knows
		}
		r, ok := rows[k]
		if !ok {
			t.Errorf("%s (%d): no row in TestAuthorizeTable: decide who may propose it", k, k)
			continue
		}
		who, ok := WhoMayPropose(k)
		if !ok {
			t.Errorf("%s (%d): no rule in its declaration", k, k)
		}
		if !docsRow(string(docs), k, who) {
			t.Errorf("%s (%d): docs/security.md has no table row `| %s | %s |`", k, k, k, who)
		}
		if got := KindOf(r.cmd("a")); got != k {
			t.Errorf("row %s builds a %s", k, got)
		}
		for _, c := range []struct {
			p     Proposer
			about string
			want  bool
		}{
			{Proposer{ID: "a"}, "a", r.self},
			{Proposer{ID: "a"}, "b", r.other},
			{Proposer{ID: "v", Voter: true}, "b", r.voter},
			{Proposer{ID: "ops", Operator: true}, "b", r.operator},
		} {
			err := Authorize(st, c.p, r.cmd(c.about))
			switch {
			case c.want && err != nil:
				t.Errorf("%s by %s about %s: %v, want allowed", k, c.p, c.about, err)
			case !c.want && !errors.Is(err, ErrUnauthorized):
				t.Errorf("%s by %s about %s: err = %v, want ErrUnauthorized", k, c.p, c.about, err)
			}
		}
	}
	for k := range rows {
		if strings.HasPrefix(k.String(), "Kind(") {
			t.Errorf("row for unknown kind %d", k)
		}
	}
}

// docsRow reports whether docs has a table row naming kind k and its rule.
func docsRow(docs string, k Kind, who string) bool {
	for _, line := range strings.Split(docs, "\n") {
		if strings.HasPrefix(line, "| "+k.String()+" (") && strings.Contains(line, "| "+who+" |") {
			return true
		}
	}
	return false
}

// TestClusterConfigHaltRefused: the one command that halted every replica
// (a ClusterConfig at version 2^31, issue 25) is refused on the leader by
// Authorize from anyone, and — once the cluster runs VersionLeastPrivilege
// — by the FSM, which goes on applying instead of halting.
func TestClusterConfigHaltRefused(t *testing.T) {
	halt := ClusterConfig{Name: "c", Partitions: 8, Version: 1 << 31}
	f, _, _ := privilegeState(t, MaxClusterVersion)
	for _, p := range []Proposer{{ID: "a"}, {ID: "v", Voter: true}, {ID: "ops", Operator: true}} {
		if err := Authorize(f.State(), p, halt); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s proposing version 2^31: %v, want ErrUnauthorized", p, err)
		}
		if err := Authorize(f.State(), p, Session{ID: RequestID{9}, Command: halt}); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s proposing version 2^31 in a session: %v, want ErrUnauthorized", p, err)
		}
	}
	// A version this binary reads that no registered node speaks.
	g, _, _ := privilegeState(t, VersionLeastPrivilege-1)
	if err := Authorize(g.State(), Proposer{ID: "ops", Operator: true}, ClusterConfig{Name: "c", Partitions: 8, Version: VersionLeastPrivilege}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a version no registered node speaks: %v, want ErrUnauthorized", err)
	}

	// The FSM at version 5: refused, not halted; the next entry applies.
	enc := func(c Command) []byte {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	idx := f.State().AppliedIndex()
	out := f.ApplyBatch([]*raft.Log{
		{Index: idx + 1, Type: raft.LogCommand, Data: enc(halt)},
		{Index: idx + 2, Type: raft.LogCommand, Data: enc(Batch{Commands: []Command{Heartbeat{Node: "x", Incarnation: 1, MaxVersion: 1 << 31}, halt}})},
		{Index: idx + 3, Type: raft.LogCommand, Data: enc(Heartbeat{Node: "z", Incarnation: 1, MinVersion: 1, MaxVersion: MaxClusterVersion})},
	})
	if _, halted := f.HaltedAt(); halted {
		t.Fatal("the replica halted on a ClusterConfig no registered node speaks")
	}
	if r := out[0].(Result); !errors.Is(r.Err, ErrVersion) {
		t.Errorf("version 2^31: %v, want ErrVersion", r.Err)
	}
	// A heartbeat earlier in the same entry does not make it spoken: the
	// rule reads the state before the entry.
	if r := out[1].(Result); len(r.Results) != 2 || !errors.Is(r.Results[1].Err, ErrVersion) {
		t.Errorf("version 2^31 after a heartbeat claiming it in one batch: %+v, want ErrVersion", r)
	}
	if r := out[2].(Result); r.Err != nil {
		t.Errorf("entry after the refusal: %v", r.Err)
	}
	if v := f.State().ActiveVersion(); v != MaxClusterVersion {
		t.Errorf("active version %d, want %d", v, MaxClusterVersion)
	}

	// Below version 5 the previous release halts on it, so this one must
	// too (replicas never differ).
	h, _, _ := privilegeState(t, VersionLeastPrivilege-1)
	h.ApplyBatch([]*raft.Log{{Index: h.State().AppliedIndex() + 1, Type: raft.LogCommand, Data: enc(halt)}})
	if _, halted := h.HaltedAt(); !halted {
		t.Error("a cluster at version 4 did not halt on an unreadable ClusterConfig (the previous release does)")
	}
}
