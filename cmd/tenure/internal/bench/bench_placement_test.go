package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchPlacementJSON(t *testing.T) {
	out, _, err := run(t, "bench", "placement", "--json", "-cases", "plain", "-partitions", "64,271", "-members", "3,50,100", "-trials", "3")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("want 6 JSON lines, got %d:\n%s", len(lines), out)
	}
	for i, l := range lines {
		var c placementCase
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("line %d not JSON: %v: %s", i, err, l)
		}
		for _, f := range []string{"max_over_avg", "min_over_avg", "moved_join", "optimal_join", "moved_leave", "optimal_leave"} {
			if !strings.Contains(l, `"`+f+`"`) {
				t.Fatalf("line %d lacks %q: %s", i, f, l)
			}
		}
		if !c.MovesWithinTarget || !c.FixedPoint {
			t.Errorf("P=%d N=%d misses the targets: %s", c.Partitions, c.Members, l)
		}
		// max − min ≤ 1 shard in the settled placement.
		avg := float64(c.Partitions) / float64(c.Members)
		if (c.MaxOverAvg-c.MinOverAvg)*avg > 1.0001 {
			t.Errorf("P=%d N=%d spread more than one shard: %s", c.Partitions, c.Members, l)
		}
	}
}

func TestBenchPlacementTable(t *testing.T) {
	out, _, err := run(t, "bench", "placement", "-partitions", "64", "-members", "4")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "leave moved") || !strings.Contains(out, "weighted") || strings.Count(out, "\n") != 3 {
		t.Fatalf("unexpected table:\n%s", out)
	}
	if _, _, err := run(t, "bench", "placement", "-trials", "0"); err == nil {
		t.Fatal("-trials 0 accepted")
	}
}

// TestBenchPlacementWeightedAndLoad: the weighted case keeps moves near
// the weighted optimum, and the load-skew scenario lowers load max/avg
// with a few swaps, counts unchanged.
func TestBenchPlacementWeightedAndLoad(t *testing.T) {
	out, _, err := run(t, "bench", "placement", "--json", "-cases", "plain,weighted", "-partitions", "1024", "-members", "10", "-trials", "3")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %d:\n%s", len(lines), out)
	}
	for i, l := range lines {
		var c placementCase
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		if c.Weighted != (i == 1) || !c.MovesWithinTarget || !c.FixedPoint {
			t.Errorf("case %d: %s", i, l)
		}
		if c.LoadSwaps == 0 || c.LoadMaxOverAvgAfter >= c.LoadMaxOverAvgBefore || !c.LoadCountsKept {
			t.Errorf("case %d: load skew not balanced: %s", i, l)
		}
	}
	if _, _, err := run(t, "bench", "placement", "-cases", "zoned"); err == nil {
		t.Error("-cases zoned accepted")
	}
}
