package mutation

import "testing"

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
