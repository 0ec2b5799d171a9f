package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseFailoverFencedFlags(t *testing.T) {
	o, err := parseFailoverFlags([]string{"-profile", "fast", "-fenced", "-fenced-after", "300ms"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.fenced || o.fencedAfter != 300*time.Millisecond || o.fencedNote() != ", fenced takeover after 300ms" {
		t.Errorf("options = %+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-fenced-after", "300ms"}, "needs -fenced"},
		{[]string{"-fenced", "-fenced-after", "-1s"}, "want ≥ 0"},
		{[]string{"-fenced", "-mode", "drain"}, "measured on crashes"},
	} {
		if _, err := parseFailoverFlags(tc.args, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want mention of %q", tc.args, err, tc.want)
		}
	}
	c := &foCluster{opts: o, agents: []*foAgent{{id: "a"}, {id: "b"}, {id: "c"}}}
	if args := strings.Join(c.agentArgs(c.agents[0]), " "); !strings.Contains(args, "--fenced-after 300ms") {
		t.Errorf("agent args %q lack --fenced-after", args)
	}
}

func TestSplitEarly(t *testing.T) {
	kept, early := splitEarly([]float64{300, -40, 0, 250, -1})
	if early != 2 || len(kept) != 3 || kept[0] != 300 || kept[1] != 0 || kept[2] != 250 {
		t.Errorf("splitEarly = %v, %d", kept, early)
	}
}
