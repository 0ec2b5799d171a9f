package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchRingJSON(t *testing.T) {
	out, _, err := run(t, "bench", "ring", "--json", "-partitions", "271", "-members", "3,10")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %d:\n%s", len(lines), out)
	}
	want := []string{"partitions", "members", "max_over_avg", "min_over_avg", "moved_join_over_optimal", "moved_leave_over_optimal", "build_ms", "lookup_ns"}
	for i, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("line %d not JSON: %v: %s", i, err, l)
		}
		for _, f := range want {
			if _, ok := obj[f]; !ok {
				t.Fatalf("line %d lacks %q: %s", i, f, l)
			}
		}
		if obj["partitions"] != 271.0 || obj["max_over_avg"].(float64) < 1 {
			t.Fatalf("implausible line %d: %s", i, l)
		}
	}
}

func TestBenchRingTable(t *testing.T) {
	out, _, err := run(t, "bench", "ring", "-partitions", "64", "-members", "4")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "moved_leave_over_optimal") || strings.Count(out, "\n") != 2 {
		t.Fatalf("unexpected table:\n%s", out)
	}
}

func TestBenchRingBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "nope"},
		{[]string{"-partitions", "abc"}, `"abc"`},
		{[]string{"-members", "3,-1"}, `"-1"`},
		{[]string{"-load", "NaN"}, "Load = NaN"},
		{[]string{"-rf", "1"}, "ReplicationFactor = 1"},
		{[]string{"-partitions", "2", "-members", "3"}, "3 members for Partitions = 2"},
		{[]string{"extra"}, `"extra"`},
	} {
		_, stderr, err := run(t, append([]string{"bench", "ring"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("bench ring %q: err=%v stderr=%q, want mention of %s", tc.args, err, stderr, tc.want)
		}
	}
}
