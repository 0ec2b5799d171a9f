package history

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/ledger"
)

// TestClaimChecked: an incarnation claim must register the node one
// incarnation above the model's record with the liveness epoch moved on;
// a claim that hands out an incarnation already used is a violation.
func TestClaimChecked(t *testing.T) {
	var got []string
	c := New(ledger.LedgerSettings{}, func(rule, msg string) { got = append(got, rule+": "+msg) })
	c.Apply(0, "", ledger.ClusterConfig{Name: "x", Partitions: 8, Version: ledger.VersionDisklessMembers}, ledger.Result{})
	claim := ledger.ClaimIncarnation{Node: "m1"}
	c.Apply(1, "", claim, ledger.Result{Node: ledger.NodeRecord{ID: "m1", Incarnation: 1, Liveness: 1, Seq: 1}})
	c.Apply(2, "", claim, ledger.Result{Node: ledger.NodeRecord{ID: "m1", Incarnation: 2, Liveness: 2, Seq: 2}})
	if len(got) != 0 {
		t.Fatalf("valid claims flagged: %v", got)
	}
	// The same incarnation again: a new process passing for the old one.
	c.Apply(3, "", claim, ledger.Result{Node: ledger.NodeRecord{ID: "m1", Incarnation: 2, Liveness: 2, Seq: 3}})
	if len(got) != 1 || !strings.HasPrefix(got[0], "liveness") {
		t.Fatalf("reused incarnation: violations %v, want one liveness violation", got)
	}
}

// TestFencedTakeoverChecked: a Takeover grant over a valid Owned owner is a
// violation (S1) unless an accepted SetTakeoverPolicy puts the shard under
// fenced takeover; the last policy covering a shard decides.
func TestFencedTakeoverChecked(t *testing.T) {
	var got []string
	c := New(ledger.LedgerSettings{}, func(rule, msg string) { got = append(got, rule+": "+msg) })
	hb := func(i uint64, id string) {
		c.Apply(i, id, ledger.Heartbeat{Node: id, Incarnation: 1}, ledger.Result{Node: ledger.NodeRecord{ID: id, Incarnation: 1, Liveness: 1, Seq: 1}})
	}
	c.Apply(0, "", ledger.ClusterConfig{Name: "x", Partitions: 8, Version: ledger.VersionFencedTakeover}, ledger.Result{})
	hb(1, "a")
	hb(2, "b")
	grant := func(i uint64, shard uint32, epoch uint64, to string, takeover bool) {
		g := ledger.Grant{Shard: shard, ExpectedEpoch: epoch, Owner: to, OwnerIncarnation: 1, OwnerLiveness: 1, Takeover: takeover}
		c.Apply(i, "", g, ledger.Result{Shard: ledger.ShardRecord{Shard: shard, Epoch: epoch + 1, Owner: to,
			OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned}})
	}
	grant(3, 1, 0, "a", false)
	grant(4, 2, 0, "a", false)
	c.Apply(5, "", ledger.SetTakeoverPolicy{First: 0, Last: 3, Fenced: true}, ledger.Result{})
	c.Apply(6, "", ledger.SetTakeoverPolicy{First: 2, Last: 2}, ledger.Result{})
	grant(7, 1, 1, "b", true) // fenced: allowed
	if len(got) != 0 {
		t.Fatalf("fenced takeover flagged: %v", got)
	}
	grant(8, 2, 1, "b", true) // fenced, then unfenced by #6
	if len(got) != 1 || !strings.HasPrefix(got[0], "S1") {
		t.Fatalf("takeover of an unfenced shard: violations %v, want one S1", got)
	}
}

// TestSessionsAndUpgradeChecked: a request id applied a second time while
// remembered, an id reused for another shard and answered, a cluster
// version going down and a gated command accepted below its version are
// violations; a replayed retry and a refused reuse are not.
func TestSessionsAndUpgradeChecked(t *testing.T) {
	var got []string
	c := New(ledger.LedgerSettings{SessionWindow: int64(600e9), MaxSessions: 100}, func(rule, msg string) { got = append(got, rule+": "+msg) })
	check := func(what string, want string) {
		t.Helper()
		switch {
		case want == "" && len(got) != 0:
			t.Fatalf("%s: flagged %v", what, got)
		case want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], want)):
			t.Fatalf("%s: violations %v, want one %s", what, got, want)
		}
		got = nil
	}
	c.Apply(1, "", ledger.ClusterConfig{Name: "x", Partitions: 8, Version: 3}, ledger.Result{})
	id := ledger.RequestID{1}
	app := ledger.App{Shard: 1, Epoch: 0, Type: "t", Now: 10}
	c.Apply(2, "", ledger.Session{ID: id, Command: app}, ledger.Result{Err: ledger.ErrNotOwner})
	c.Apply(3, "", ledger.Session{ID: id, Command: app}, ledger.Result{Err: ledger.ErrNotOwner, Replayed: true})
	check("a replayed retry", "")
	c.Apply(4, "", ledger.Session{ID: id, Command: ledger.App{Shard: 2, Type: "t", Now: 11}}, ledger.Result{Err: ledger.ErrInvalid})
	check("a refused reuse", "")
	c.Apply(5, "", ledger.Session{ID: id, Command: app}, ledger.Result{Err: ledger.ErrNotOwner})
	check("applied again", "sessions")
	c.Apply(6, "", ledger.Session{ID: id, Command: ledger.App{Shard: 2, Type: "t", Now: 12}}, ledger.Result{Replayed: true})
	check("a reuse answered", "sessions")
	c.Apply(7, "", ledger.ClusterConfig{Name: "x", Partitions: 8, Version: 2}, ledger.Result{})
	check("version down", "upgrade")
	c.Apply(8, "", ledger.LogSettings{SessionWindow: 1, MaxSessions: 1}, ledger.Result{})
	check("gated below its version", "upgrade")
}
