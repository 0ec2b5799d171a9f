package simulation

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/mutation"
)

// TestRuleMutationsCaught is the negative test of the rules whose checks
// could once not fail (issue 26): with each rule's mutation on, the sweep
// reports a violation of that very rule within a few seeds — S3 (an
// acknowledgement given before the commit is lost with a leader change),
// L1, L2 and L3 (judged at the end of full-length runs), the session
// table and the cluster version. Run with -tags mutations (make test).
func TestRuleMutationsCaught(t *testing.T) {
	if !mutation.Enabled {
		t.Skip(mutation.SkipReason)
	}
	for _, c := range []struct {
		m    mutation.Switch
		rule string
	}{
		{mutation.AckBeforeCommit, "S3"},
		{mutation.LeaveExpiredShards, "L1"},
		{mutation.NoRebalance, "L2"},
		{mutation.NoHandoff, "L3"},
		{mutation.SessionDedupOff, "sessions"},
		{mutation.RequestIDIgnored, "contract"},
		{mutation.ClusterVersionDown, "contract"},
		{mutation.GatedWhileMixed, "contract"},
	} {
		t.Run(c.m.String(), func(t *testing.T) {
			rep := sweepMutation(t, c.m, 30)
			if rep.CaughtBy == "" {
				t.Fatalf("%s (%s) not caught within 30 seeds", c.m, c.m.Rule())
			}
			// "12.3s L1: ..." — the rule follows the time.
			if f := strings.Fields(rep.Violation); len(f) < 2 || f[1] != c.rule+":" {
				t.Fatalf("%s caught at seed %d as %q, want a %s violation", c.m, rep.Seed, rep.Violation, c.rule)
			}
			t.Logf("%s caught at seed %d: %s", c.m, rep.Seed, rep.Violation)
		})
	}
}
