package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchScaleBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "nope"},
		{[]string{"-nodes", "1"}, "-nodes 1"},
		{[]string{"-nodes", "x"}, `"x"`},
		{[]string{"-shards", "3", "-nodes", "4"}, "-shards 3"},
		{[]string{"-profile", "turbo"}, `profile "turbo"`},
		{[]string{"-idle", "0s"}, "-idle 0s"},
		{[]string{"extra"}, `"extra"`},
	} {
		_, stderr, err := run(t, append([]string{"bench", "scale"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("bench scale %q: err=%v stderr=%q, want mention of %s", tc.args, err, stderr, tc.want)
		}
	}
}

// TestBenchScaleSmoke runs the whole bench on a tiny cluster. The ownership
// part is virtual time (milliseconds of wall time); the gossip part runs 4
// memberlist instances in memory for a short idle window.
func TestBenchScaleSmoke(t *testing.T) {
	out, _, err := run(t, "bench", "scale", "--json", "-nodes", "4", "-shards", "64", "-profile", "fast", "-idle", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	var r scaleResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v: %s", err, out)
	}
	if r.Nodes != 4 || r.Shards != 64 || r.GossipNodes != 4 || r.MaxLoad < 16 || r.MinLoad < 1 || r.MinLoad > 16 {
		t.Errorf("implausible result: %+v", r)
	}
	// Moves on one join/drain/crash are at least what the node gained or
	// lost, and at most a small multiple of it.
	for _, c := range []struct {
		name           string
		moved, optimal int
	}{{"join", r.JoinMoved, r.JoinOptimal}, {"drain", r.LeaveMoved, r.LeaveOptimal}, {"crash", r.CrashMoved, r.CrashOptimal}} {
		if c.optimal == 0 || c.moved < c.optimal || c.moved > 3*c.optimal {
			t.Errorf("%s: moved %d, optimal %d", c.name, c.moved, c.optimal)
		}
	}
}
