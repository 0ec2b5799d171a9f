package benchkit

import (
	"encoding/json"
	"net"
	"os"
	"testing"
)

func TestNearestRank(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}} {
		if got := NearestRank(s, c.q); got != c.want {
			t.Errorf("NearestRank(1..10, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := NearestRank(nil, 0.5); got != 0 {
		t.Errorf("NearestRank(nil) = %v, want 0", got)
	}
}

func TestFailoverSummaryFlattens(t *testing.T) {
	type outer struct {
		FailoverSummary
		Seed uint64 `json:"seed"`
	}
	b, err := json.Marshal(outer{FailoverSummary{Mode: "crash", Runs: 2, P50Ms: 1.5}, 7})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mode":"crash","profile":"","runs":2,"min_ms":0,"p50_ms":1.5,"p99_ms":0,"max_ms":0,"overlaps":0,"seed":7}`
	if string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
}

func TestFreeLoopbackAddrs(t *testing.T) {
	addrs, err := FreeLoopbackAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Errorf("address %s twice in %v", a, addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s not released: %v", a, err)
			continue
		}
		l.Close()
	}
}

func TestWorkDir(t *testing.T) {
	keep := t.TempDir()
	d, cleanup, err := WorkDir(keep, "x-")
	if err != nil || d != keep {
		t.Fatalf("WorkDir(%q) = %q, %v", keep, d, err)
	}
	cleanup()
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the caller's directory was removed: %v", err)
	}
	d, cleanup, err = WorkDir("", "benchkit-test-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Errorf("temporary directory %s left behind: %v", d, err)
	}
}
