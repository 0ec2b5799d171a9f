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
