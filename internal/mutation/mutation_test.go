package mutation

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Every switch has a name and a rule, and names are unique.
func TestNamesAndRules(t *testing.T) {
	if len(names) != int(numSwitches) || len(rules) != int(numSwitches) {
		t.Fatalf("%d names, %d rules for %d switches", len(names), len(rules), numSwitches)
	}
	seen := map[string]bool{}
	for _, s := range All() {
		if s.Rule() == "" || seen[s.String()] {
			t.Errorf("switch %d (%s): empty rule or duplicate name", s, s)
		}
		seen[s.String()] = true
		if b, ok := ByName(s.String()); !ok || b != s {
			t.Errorf("ByName(%s) = %v, %v", s, b, ok)
		}
	}
	if len(All()) < 20 {
		t.Errorf("%d mutations, want at least 20", len(All()))
	}
}

// mutations.json (written by `make mutations`) has an entry for every
// registered switch, each caught by the sweep or by tier 2, and caught by
// its effect (the mutated ledger accepted what the rule refuses, or a
// guarantee broke), not by an error-code mismatch: a switch added without
// regenerating the report, or one the harness misses, fails here, in the
// first line of `make test`, with no build tag needed.
func TestMutationsReportComplete(t *testing.T) {
	b, err := os.ReadFile("../../mutations.json")
	if err != nil {
		t.Fatalf("mutations.json: %v (make mutations writes it)", err)
	}
	var report []struct {
		Name      string `json:"name"`
		CaughtBy  string `json:"caught_by"`
		Violation string `json:"violation"`
	}
	if err := json.Unmarshal(b, &report); err != nil {
		t.Fatalf("mutations.json: %v", err)
	}
	caught := map[string]string{}
	for _, r := range report {
		if _, ok := ByName(r.Name); !ok {
			t.Errorf("mutations.json names %q, which is not a registered switch", r.Name)
		}
		caught[r.Name] = r.CaughtBy
		if strings.Contains(r.Violation, ": rejected with ") {
			// The mutated ledger still refused the command, only with
			// another error: the rule's own effect was never observed.
			t.Errorf("mutation %s is caught only by an error-code mismatch (the mutated ledger still refused): %s", r.Name, r.Violation)
		}
	}
	for _, s := range All() {
		by, ok := caught[s.String()]
		switch {
		case !ok:
			t.Errorf("mutation %s (%s) is missing from mutations.json: run make mutations", s, s.Rule())
		case by != "sweep" && by != "tier2" && by != "test":
			t.Errorf("mutation %s (%s) is not caught (caught_by %q in mutations.json)", s, s.Rule(), by)
		}
	}
}
