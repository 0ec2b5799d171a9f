package s4check

import (
	"strings"
	"testing"
)

func TestDecodeBatch(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
		err  string
	}{
		{`[{"shard":1,"epoch":2,"node":"a"},{"shard":2}]`, 2, ""},
		{`{"shard":1,"epoch":2,"node":"a"}`, 1, ""},
		{`[]`, 0, ""},
		{`"tick"`, 0, "want a JSON array of ticks"},
		{`[{"shard":-1}]`, 0, "want a JSON array of ticks"},
		{``, 0, "want a JSON array of ticks"},
	} {
		got, err := DecodeBatch([]byte(tc.body))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("DecodeBatch(%q) error %v, want %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != tc.n {
			t.Errorf("DecodeBatch(%q) = %d ticks, %v; want %d", tc.body, len(got), err, tc.n)
		}
	}
}

func TestCheck(t *testing.T) {
	ticks := func(spec ...any) []Tick {
		var out []Tick
		for i := 0; i < len(spec); i += 3 {
			out = append(out, Tick{Shard: 1, Node: spec[i].(string), Epoch: uint64(spec[i+1].(int)), UnixNano: int64(spec[i+2].(int))})
		}
		SortByTime(out)
		return out
	}
	for _, tc := range []struct {
		name string
		ts   []Tick
		want []string
	}{
		{"clean handoff", ticks("a", 1, 10, "a", 1, 20, "b", 2, 35, "b", 2, 45), nil},
		{"restart keeps node, new epoch", ticks("a", 1, 10, "a", 2, 30), nil},
		{"stale owner after successor", ticks("a", 1, 10, "b", 2, 15, "a", 1, 20), []string{"shard 1: a acted at epoch 1"}},
		{"two nodes one epoch", ticks("a", 1, 10, "b", 1, 12), []string{"shard 1: a and b both acted at epoch 1"}},
		{"equal times order by epoch", ticks("b", 2, 10, "a", 1, 10), nil},
		{"every violation", ticks("a", 3, 10, "b", 1, 11, "c", 3, 12), []string{"b acted at epoch 1", "a and c both acted at epoch 3"}},
	} {
		var got []string
		Check(tc.ts, func(v Violation) bool { got = append(got, v.String()); return true })
		if len(got) != len(tc.want) {
			t.Errorf("%s: violations %q, want %d", tc.name, got, len(tc.want))
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tc.want[i]) {
				t.Errorf("%s: violation %d = %q, want it to contain %q", tc.name, i, got[i], tc.want[i])
			}
		}
	}
	n := 0
	Check(ticks("a", 3, 10, "b", 1, 11, "c", 1, 12), func(Violation) bool { n++; return false })
	if n != 1 {
		t.Errorf("report returned false: Check went on to %d reports", n)
	}
}
