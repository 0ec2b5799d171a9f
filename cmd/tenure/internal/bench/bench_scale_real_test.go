package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchScaleReal runs `bench scale --real` at 5 agents (3 voters, 2
// disk-less members) and checks every figure was measured: the cluster
// converged, the killed member's shards were owned again, and it came
// back disk-less under a newer incarnation.
func TestBenchScaleReal(t *testing.T) {
	bin := tenureBinary(t)
	stdout, stderr, err := run(t, "bench", "scale", "--real", "-nodes", "5", "-shards", "32", "-profile", "fast",
		"-idle", "2s", "-settle-timeout", "90s", "-agent-bin", bin, "--json")
	if err != nil {
		t.Fatalf("bench scale --real: %v\n%s", err, stderr)
	}
	var r realScaleResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &r); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	if r.Nodes != 5 || r.Voters != 3 || r.Members != 2 || r.Shards != 32 {
		t.Errorf("shape %+v", r)
	}
	// CommitsPerSec may be 0: at cluster version 4 an idle cluster renews
	// leases off the log.
	if r.ConvergeMs <= 0 || r.RSSMedianMB <= 0 || r.CommitsPerSec < 0 || r.CPUMedianPct <= 0 {
		t.Errorf("unmeasured figures: %+v", r)
	}
	if r.QuietMs < r.ConvergeMs {
		t.Errorf("quiet after %v ms, before converging (%v ms)", r.QuietMs, r.ConvergeMs)
	}
	if !strings.HasPrefix(r.FailoverMember, "member-") || r.FailoverShards == 0 || r.FailoverMs <= 0 || r.RejoinMs <= 0 {
		t.Errorf("failover not measured: %+v", r)
	}
	if r.StopAllMs <= 0 || len(r.StopAllUnclean) > 0 {
		t.Errorf("SIGTERM to every agent: last exit after %v ms, not exiting 0 by themselves: %v", r.StopAllMs, r.StopAllUnclean)
	}
	if r.RejoinIncarnTo <= r.RejoinIncarnFrom {
		t.Errorf("restarted disk-less member at incarnation %d, before %d: want newer", r.RejoinIncarnTo, r.RejoinIncarnFrom)
	}
}

func TestBenchScaleRealBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nodes", "3", "-voters", "3"}, "at least one disk-less member"},
		{[]string{"-voters", "2"}, "-voters 2"},
		{[]string{"-nodes", "1000"}, "-nodes 1000"},
		{[]string{"-profile", "turbo"}, `"turbo"`},
		{[]string{"-member-nice", "25"}, "-member-nice 25"},
	} {
		_, stderr, err := run(t, append([]string{"bench", "scale", "--real"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("bench scale --real %q: err=%v, want mention of %s", tc.args, err, tc.want)
		}
	}
}
