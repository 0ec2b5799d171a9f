package main

import (
	"strings"
	"testing"
)

func TestBenchIdleBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "nope"},
		{[]string{"-profile", "turbo"}, `profile "turbo"`},
		{[]string{"-nodes", "2"}, "-nodes 2"},
		{[]string{"-window", "10ms"}, "-window 10ms"},
		{[]string{"-partitions", "3"}, "-partitions 3"},
		{[]string{"extra"}, `"extra"`},
	} {
		_, stderr, err := run(t, append([]string{"bench", "idle"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("bench idle %q: err=%v stderr=%q, want mention of %s", tc.args, err, stderr, tc.want)
		}
	}
}
