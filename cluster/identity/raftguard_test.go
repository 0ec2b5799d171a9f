package identity

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/internal/raftwire"
)

func TestValidateRaftConfiguration(t *testing.T) {
	var many []string
	for i := 0; i <= maxConfigServers; i++ {
		many = append(many, fmt.Sprintf("s%d:N", i))
	}
	many[0] = "s0:V"
	for _, tc := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"three voters and a standby", raftwire.EncodeConfig("n1:V", "n2:V", "n3:V", "n4:N"), true},
		{"staging", raftwire.EncodeConfig("n1:V", "n2:S"), true},
		{"garbage", []byte{0xff, 0x00, 0x13}, false},
		{"empty", nil, false},
		{"truncated", raftwire.EncodeConfig("n1:V", "n2:V")[:9], false},
		{"no server", raftwire.EncodeConfig(), false},
		{"no voter", raftwire.EncodeConfig("n1:N"), false},
		{"duplicate id", raftwire.EncodeConfig("n1:V@a", "n1:V@b"), false},
		{"duplicate address", raftwire.EncodeConfig("n1:V@a", "n2:V@a"), false},
		{"empty id", raftwire.EncodeConfig(":V@a"), false},
		{"long id", raftwire.EncodeConfig(strings.Repeat("x", maxConfigField+1) + ":V@a"), false},
		{"unknown suffrage", raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{Suffrage: 7, ID: "n1", Address: "a"}}}), false},
		{"too many servers", raftwire.EncodeConfig(many...), false},
	} {
		err := validateRaftConfiguration(tc.data)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// Every rule of decideRaft, one row each: the message, the node's view,
// and whether it passes (and makes the sender the term's leader).
func TestDecideRaft(t *testing.T) {
	voters := map[string]bool{"n1": true, "n2": true, "n3": true}
	// n3 follows n1 at term 5; n4 is a non-voter of the configuration.
	follower := raftGuardState{Voters: voters, Configured: true, Term: 5, Leader: "n1", Self: "n3", LeaderTerm: 5, LeaderID: "n1"}
	fresh := raftGuardState{}
	node := func(id string) Peer { return Peer{ID: id, Role: RoleNode} }
	msg := func(typ byte, id string, term uint64) raftMessage { return raftMessage{Type: typ, ID: id, Term: term} }
	withCfg := func(m raftMessage, cfg []byte) raftMessage { m.Configs = append(m.Configs, cfg); return m }
	leading := follower
	leading.Leader, leading.LeaderID, leading.LeaderTerm = "n3", "", 0
	removed := follower
	removed.Voters = map[string]bool{"n2": true, "n3": true} // n1 appended its own removal
	for _, tc := range []struct {
		name   string
		peer   Peer
		msg    raftMessage
		st     raftGuardState
		reason string // "" passes
		record bool
	}{
		{"leader's heartbeat", node("n1"), msg(raftwire.AppendEntries, "n1", 5), follower, "", true},
		{"leader's snapshot", node("n1"), msg(raftwire.InstallSnapshot, "n1", 5), follower, "", true},
		{"member certificate", Peer{ID: "n1", Role: RoleMember}, msg(raftwire.AppendEntries, "n1", 5), follower, RefusedRole, false},
		{"operator certificate", Peer{ID: "n1", Role: RoleOperator}, msg(raftwire.RequestVote, "n1", 6), follower, RefusedRole, false},
		{"no role proven", Peer{ID: "n1"}, msg(raftwire.AppendEntries, "n1", 5), follower, RefusedRole, false},
		{"speaks for another", node("n2"), msg(raftwire.AppendEntries, "n1", 5), follower, refusedID, false},
		{"non-voter RequestVote at a higher term", node("n4"), msg(raftwire.RequestVote, "n4", 9), follower, refusedNotVoter, false},
		{"non-voter PreVote", node("n4"), msg(raftwire.RequestPreVote, "n4", 9), follower, refusedNotVoter, false},
		{"non-voter AppendEntries at a higher term", node("n4"), msg(raftwire.AppendEntries, "n4", 9), follower, refusedNotVoter, false},
		{"non-voter InstallSnapshot", node("n4"), msg(raftwire.InstallSnapshot, "n4", 9), follower, refusedNotVoter, false},
		{"non-voter TimeoutNow", node("n4"), msg(raftwire.TimeoutNow, "n4", 0), follower, refusedNotVoter, false},
		{"voter RequestVote at a higher term", node("n2"), msg(raftwire.RequestVote, "n2", 6), follower, "", false},
		{"voter PreVote", node("n2"), msg(raftwire.RequestPreVote, "n2", 6), follower, "", false},
		{"voter AppendEntries at a higher term: a new leader", node("n2"), msg(raftwire.AppendEntries, "n2", 6), follower, "", true},
		{"another voter's log at the leader's term", node("n2"), msg(raftwire.AppendEntries, "n2", 5), follower, refusedNotLeader, false},
		{"another voter's snapshot at the leader's term", node("n2"), msg(raftwire.InstallSnapshot, "n2", 5), follower, refusedNotLeader, false},
		{"stale log passes (raft refuses it unchanged)", node("n2"), msg(raftwire.AppendEntries, "n2", 4), follower, "", false},
		{"log at the term this node leads", node("n2"), msg(raftwire.AppendEntries, "n2", 5), leading, refusedNotLeader, false},
		{"TimeoutNow from the leader", node("n1"), msg(raftwire.TimeoutNow, "n1", 0), follower, "", false},
		{"TimeoutNow from another voter", node("n2"), msg(raftwire.TimeoutNow, "n2", 0), follower, refusedNotLeader, false},
		{"TimeoutNow without a leader", node("n2"), msg(raftwire.TimeoutNow, "n2", 0), raftGuardState{Voters: voters, Configured: true, Term: 5}, refusedNotLeader, false},
		{"leader after appending its own removal, same term", node("n1"), msg(raftwire.AppendEntries, "n1", 5), removed, "", true},
		{"removed leader at a later term", node("n1"), msg(raftwire.AppendEntries, "n1", 6), removed, refusedNotVoter, false},
		{"removed leader's RequestVote", node("n1"), msg(raftwire.RequestVote, "n1", 6), removed, refusedNotVoter, false},
		{"bootstrap: vote request before any configuration", node("n2"), msg(raftwire.RequestVote, "n2", 1), fresh, "", false},
		{"fresh node: first log from anyone with a node certificate", node("n2"), msg(raftwire.AppendEntries, "n2", 3), fresh, "", true},
		{"fresh node: still no member", Peer{ID: "n2", Role: RoleMember}, msg(raftwire.AppendEntries, "n2", 3), fresh, RefusedRole, false},
		{"configuration entry that decodes", node("n1"), withCfg(msg(raftwire.AppendEntries, "n1", 5), raftwire.EncodeConfig("n1:V", "n2:V", "n3:V", "n5:N")), follower, "", true},
		{"configuration entry with garbage", node("n1"), withCfg(msg(raftwire.AppendEntries, "n1", 5), []byte("garbage")), follower, refusedConfig, false},
		{"snapshot configuration without a voter", node("n1"), withCfg(msg(raftwire.InstallSnapshot, "n1", 5), raftwire.EncodeConfig("n1:N")), follower, refusedConfig, false},
		{"deprecated peer set", node("n1"), raftMessage{Type: raftwire.AppendEntries, ID: "n1", Term: 5, Deprecated: true}, follower, refusedConfig, false},
	} {
		record, err := decideRaft(tc.peer, tc.msg, tc.st)
		got := ""
		if err != nil {
			got = refusalReason(err)
		}
		if got != tc.reason || record != tc.record {
			t.Errorf("%s: refused %q record %v (err %v), want refused %q record %v", tc.name, got, record, err, tc.reason, tc.record)
		}
	}
}

// The guard remembers the leader whose log it accepted at a term: another
// voter at that term is refused, a higher term moves it on.
func TestRaftGuardRecordsLeader(t *testing.T) {
	term := uint64(3)
	g := &Guard{view: RaftView{
		Configuration: func() raft.Configuration {
			return raft.DecodeConfiguration(raftwire.EncodeConfig("n1:V", "n2:V", "n3:V"))
		},
		Term: func() uint64 { return term },
		Self: "n3",
	}}
	n1, n2 := Peer{ID: "n1", Role: RoleNode}, Peer{ID: "n2", Role: RoleNode}
	ae := func(id string, t uint64) raftMessage {
		return raftMessage{Type: raftwire.AppendEntries, ID: id, Term: t}
	}
	if err := g.check(n1, ae("n1", 3)); err != nil {
		t.Fatal(err)
	}
	if err := g.check(n2, ae("n2", 3)); refusalReason(err) != refusedNotLeader {
		t.Fatalf("second leader at term 3: %v", err)
	}
	term = 4 // n2 won an election
	if err := g.check(n2, ae("n2", 4)); err != nil {
		t.Fatal(err)
	}
	if err := g.check(n1, ae("n1", 4)); refusalReason(err) != refusedNotLeader {
		t.Fatalf("old leader at the new term: %v", err)
	}
	if err := g.check(n1, ae("n1", 3)); err != nil {
		t.Fatalf("stale log must pass to raft (it answers with its term): %v", err)
	}
}

// dialStream is a StreamLayer whose Dial hands out one end of a pipe.
// FuzzRaftGuard feeds arbitrary bytes (a type byte and a msgpack request)
// through the guard's decoder and decision, as the node that n1 leads at
// term 5 sees them arrive from voter n2: nothing panics, and nothing that
// passes is log or a TimeoutNow from n2 at n1's term, speaks for another
// id, or carries a configuration raft cannot decode. A member certificate
// never passes. Seeds: testdata/fuzz/FuzzRaftGuard.
func FuzzRaftGuard(f *testing.F) {
	st := raftGuardState{Voters: map[string]bool{"n1": true, "n2": true, "n3": true}, Configured: true,
		Term: 5, Leader: "n1", Self: "n3", LeaderTerm: 5, LeaderID: "n1"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		peer := Peer{ID: "n2", Role: RoleNode}
		rec := &recorder{r: bufio.NewReader(bytes.NewReader(data[1:])), max: 1 << 20}
		msg, err := decodeRaftMessage(codec.NewDecoder(rec, &codec.MsgpackHandle{}), data[0], peer)
		if err != nil {
			return
		}
		if _, err := decideRaft(Peer{ID: "n2", Role: RoleMember}, msg, st); err == nil {
			t.Fatalf("a member certificate passed: %+v", msg)
		}
		if _, err := decideRaft(peer, msg, st); err != nil {
			return
		}
		if msg.ID != "n2" {
			t.Fatalf("passed as server %q from n2", msg.ID)
		}
		if msg.Type == raftwire.TimeoutNow || ((msg.Type == raftwire.AppendEntries || msg.Type == raftwire.InstallSnapshot) && msg.Term == st.LeaderTerm) {
			t.Fatalf("passed type %d at term %d from n2, which does not lead", msg.Type, msg.Term)
		}
		for _, c := range msg.Configs {
			_ = raft.DecodeConfiguration(c) // panics (fails the fuzz run) if the guard let a bad one through
		}
	})
}

// BenchmarkRaftGuardCheck is the guard's cost per message on a node whose
// configuration has 3 voters and 97 non-voters (a cluster below version
// 5): the configuration copy, the voter set and the decision.
func BenchmarkRaftGuardCheck(b *testing.B) {
	servers := []string{"n1:V", "n2:V", "n3:V"}
	for i := 4; i <= 100; i++ {
		servers = append(servers, fmt.Sprintf("n%d:N", i))
	}
	cfg := raft.DecodeConfiguration(raftwire.EncodeConfig(servers...))
	g := &Guard{view: RaftView{
		Configuration: func() raft.Configuration { return cfg.Clone() },
		Term:          func() uint64 { return 5 },
		Leader:        func() string { return "n1" },
		Self:          "n50",
	}}
	peer := Peer{ID: "n1", Role: RoleNode}
	msg := raftMessage{Type: raftwire.AppendEntries, ID: "n1", Term: 5}
	b.ReportAllocs()
	for b.Loop() {
		if err := g.check(peer, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// Log refused by the voter check at a current or higher term asks for a
// vouch round; a vouched leader's log at that term then passes, and a
// vouch never displaces the leader recorded at a term.
func TestRaftGuardVouch(t *testing.T) {
	var asked []string
	g := &Guard{view: RaftView{
		Configuration: func() raft.Configuration {
			return raft.DecodeConfiguration(raftwire.EncodeConfig("n1:V", "n2:V", "n3:V"))
		},
		Term:          func() uint64 { return 5 },
		Self:          "n3",
		UnknownLeader: func(id string, term uint64) { asked = append(asked, fmt.Sprintf("%s@%d", id, term)) },
	}}
	n4 := Peer{ID: "n4", Role: RoleNode}
	ae := raftMessage{Type: raftwire.AppendEntries, ID: "n4", Term: 6}
	if err := g.check(n4, ae); refusalReason(err) != refusedNotVoter {
		t.Fatalf("unknown n4's log: %v", err)
	}
	_ = g.check(n4, raftMessage{Type: raftwire.RequestVote, ID: "n4", Term: 7})                                 // votes: no round
	_ = g.check(n4, raftMessage{Type: raftwire.AppendEntries, ID: "n4", Term: 4})                               // stale: no round
	_ = g.check(Peer{ID: "n4", Role: RoleMember}, raftMessage{Type: raftwire.AppendEntries, ID: "n4", Term: 6}) // a member: no round
	if want := []string{"n4@6"}; !slices.Equal(asked, want) {
		t.Fatalf("vouch rounds asked %q, want %q", asked, want)
	}
	if !g.Vouch("n4", 6) {
		t.Fatal("vouch refused")
	}
	if err := g.check(n4, ae); err != nil {
		t.Fatalf("vouched n4's log at term 6: %v", err)
	}
	if err := g.check(n4, raftMessage{Type: raftwire.AppendEntries, ID: "n4", Term: 7}); refusalReason(err) != refusedNotVoter {
		t.Fatalf("vouched at 6, n4's log at 7 (not vouched): %v", err)
	}
	if g.Vouch("n5", 6) || g.Vouch("n5", 5) {
		t.Fatal("a vouch displaced term 6's leader")
	}
}
