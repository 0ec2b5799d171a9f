package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/s4check"
	"github.com/tenurehq/tenure/node"
)

func TestBenchFailoverBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "nope"},
		{[]string{"-mode", "explode"}, `-mode "explode"`},
		{[]string{"-profile", "turbo"}, `profile "turbo"`},
		{[]string{"-nodes", "2"}, "-nodes 2"},
		{[]string{"-nodes", "five"}, `"five"`},
		{[]string{"-runs", "0"}, "-runs 0"},
		{[]string{"-partitions", "3"}, "-partitions 3"},
		{[]string{"-tick", "0s"}, "-tick 0s"},
		{[]string{"-burn", "65"}, "-burn 65"},
		{[]string{"-burn", "-1"}, "-burn -1"},
		{[]string{"extra"}, `"extra"`},
	} {
		_, stderr, err := run(t, append([]string{"bench", "failover"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("bench failover %q: err=%v stderr=%q, want mention of %s", tc.args, err, stderr, tc.want)
		}
	}
}

func TestParseFailoverFlagsDefaults(t *testing.T) {
	o, err := parseFailoverFlags([]string{"-profile", "fast", "-mode", "drain", "-seed", "3"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	fast, _ := node.ProfileFast.Timing()
	if o.nodes != 5 || o.runs != 20 || o.mode != "drain" || o.lease != fast.Lease || o.seed != 3 {
		t.Errorf("options = %+v", o)
	}
}

func TestParseFailoverFlagsDown(t *testing.T) {
	o, err := parseFailoverFlags([]string{"-mode", "restart", "-down", "30s"}, &strings.Builder{})
	if err != nil || o.down != 30*time.Second {
		t.Fatalf("-mode restart -down 30s: %+v, %v", o, err)
	}
	for _, args := range [][]string{{"-down", "30s"}, {"-mode", "restart", "-down", "-1s"}, {"-mode", "restart", "-down", "11m"}} {
		if _, err := parseFailoverFlags(args, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "-down") {
			t.Errorf("%q: err %v, want a -down error", args, err)
		}
	}
}

func TestFirstTickBy(t *testing.T) {
	r := newFoRecorder()
	r.add([]s4check.Tick{{Shard: 1, Node: "a", UnixNano: 5}, {Shard: 2, Node: "a", UnixNano: 30}, {Shard: 3, Node: "b", UnixNano: 12}, {Shard: 4, Node: "a", UnixNano: 20}})
	if first, ok := r.firstBy("a", 10); !ok || first.Shard != 4 {
		t.Errorf("firstBy(a, 10) = %+v, %v; want shard 4", first, ok)
	}
	if _, ok := r.firstBy("a", 30); ok {
		t.Error("firstBy(a, 30) found a tick; want none after 30")
	}
}

func TestHandoffAnalysis(t *testing.T) {
	ticks := func(spec ...any) []s4check.Tick {
		var out []s4check.Tick
		for i := 0; i < len(spec); i += 3 {
			out = append(out, s4check.Tick{Shard: 1, Node: spec[i].(string), Epoch: uint64(spec[i+1].(int)), UnixNano: int64(spec[i+2].(int))})
		}
		s4check.SortByTime(out)
		return out
	}
	for _, tc := range []struct {
		name           string
		ts             []s4check.Tick
		found, overlap bool
		first, last    int64
		violations     int
	}{
		{"clean handoff", ticks("a", 1, 10, "a", 1, 20, "b", 2, 35, "b", 2, 45), true, false, 35, 20, 0},
		{"no successor yet", ticks("a", 1, 10, "a", 1, 20), false, false, 0, 20, 0},
		{"overlap", ticks("a", 1, 10, "b", 2, 15, "a", 1, 20), true, true, 15, 20, 1},
		{"restart keeps node, new epoch", ticks("a", 1, 10, "a", 2, 30), true, false, 30, 10, 0},
		{"two nodes one epoch", ticks("a", 1, 10, "b", 1, 12), false, false, 0, 10, 1},
	} {
		first, last, found, overlap := handoff(tc.ts, "a", 1)
		if found != tc.found || overlap != tc.overlap || last != tc.last || (found && first.UnixNano != tc.first) {
			t.Errorf("%s: handoff = first %d last %d found %v overlap %v, want %d %d %v %v",
				tc.name, first.UnixNano, last, found, overlap, tc.first, tc.last, tc.found, tc.overlap)
		}
		if got := countViolations(tc.ts); got != tc.violations {
			t.Errorf("%s: %d violations, want %d", tc.name, got, tc.violations)
		}
	}
}

func TestSummarizePhases(t *testing.T) {
	if summarizePhases(nil) != nil {
		t.Error("no phases: want no summary")
	}
	var ps []handoffPhases
	for i := range 100 {
		ps = append(ps, handoffPhases{CommitMs: float64(i), ReplicateMs: float64(100 + i), ActMs: float64(200 + i)})
	}
	s := summarizePhases(ps)
	if s.Samples != 100 || s.CommitP50Ms != 49 || s.CommitP99Ms != 98 || s.ReplicateP50Ms != 149 || s.ActP99Ms != 298 {
		t.Errorf("summary %+v", *s)
	}
}

// --agent-log-level reaches the agents' --log-level (warn by default, as
// before); an unknown level is refused.
func TestFailoverAgentLogLevel(t *testing.T) {
	c := &foCluster{opts: failoverOptions{}, dir: t.TempDir()}
	c.agents = []*foAgent{{id: "bench-00"}, {id: "bench-01"}, {id: "bench-02"}}
	if args := strings.Join(c.agentArgs(c.agents[0]), " "); !strings.Contains(args, "--log-level warn") {
		t.Fatalf("default agent args %q: want --log-level warn", args)
	}
	o, err := parseFailoverFlags([]string{"-mode", "drain", "-agent-log-level", "debug"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	c.opts = o
	if args := strings.Join(c.agentArgs(c.agents[0]), " "); !strings.Contains(args, "--log-level debug") {
		t.Fatalf("agent args %q: want --log-level debug", args)
	}
	if _, err := parseFailoverFlags([]string{"-agent-log-level", "loud"}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "-agent-log-level") {
		t.Fatalf("-agent-log-level loud: %v, want a refusal", err)
	}
}
