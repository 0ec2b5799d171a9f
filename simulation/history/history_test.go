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
