package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchLedgerRuns runs a tiny `tenure bench ledger --json` end to end
// (3 voters over loopback TCP, bolt with fsync) and checks its output shape.
func TestBenchLedgerRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three raft voters")
	}
	out, _, err := run(t, "bench", "ledger", "--json", "--proposers", "1,4", "--duration", "200ms", "--dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %q", out)
	}
	for i, l := range lines {
		var row map[string]float64
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		for _, k := range []string{"proposers", "transitions_per_sec", "p50_ms", "p99_ms"} {
			if _, ok := row[k]; !ok {
				t.Fatalf("line %q lacks %s", l, k)
			}
		}
		if row["proposers"] != []float64{1, 4}[i] || row["transitions_per_sec"] <= 0 {
			t.Fatalf("line %q", l)
		}
	}
	if _, _, err := run(t, "bench", "ledger", "--proposers", "0"); err == nil {
		t.Fatal("proposers 0 accepted")
	}
}
