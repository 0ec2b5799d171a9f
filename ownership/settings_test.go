package ownership

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// The leader commits the settings its replica applies with once the
// cluster runs ledger.VersionLogSettings, and only until they are logged.
func TestPlannerLogsSettings(t *testing.T) {
	p, err := NewPlanner(TestConfig())
	if err != nil {
		t.Fatal(err)
	}
	local := ledger.LedgerSettings{JobRetention: int64(time.Hour), MaxFinishedJobs: 10, DefaultMaxAttempts: 3,
		MaxPayload: 1000, SessionWindow: int64(time.Minute), MaxSessions: 64}
	in := func(version uint32, s ledger.LedgerSettings) Input {
		return Input{Cluster: ledger.ClusterInfo{Name: "c", Partitions: 4, Version: version}, Settings: s}
	}
	p.Establish(t0, in(3, local), time.Time{})
	isLogSettings := func(cmds []ledger.Command) (ledger.LogSettings, bool) {
		for _, c := range cmds {
			if ls, ok := c.(ledger.LogSettings); ok {
				return ls, true
			}
		}
		return ledger.LogSettings{}, false
	}
	now := t0.Add(time.Second)
	for _, tc := range []struct {
		name    string
		version uint32
		s       ledger.LedgerSettings
		want    bool
	}{
		{"version 3", ledger.VersionLogSettings - 1, local, false},
		{"version 4, not logged", ledger.VersionLogSettings, local, true},
		{"already logged", ledger.VersionLogSettings, func() ledger.LedgerSettings { s := local; s.Logged = true; return s }(), false},
		{"no settings in the input", ledger.VersionLogSettings, ledger.LedgerSettings{}, false},
	} {
		cmds, err := p.Plan(now, in(tc.version, tc.s))
		if err != nil {
			t.Fatal(err)
		}
		ls, ok := isLogSettings(cmds)
		if ok != tc.want {
			t.Fatalf("%s: proposals %v, want LogSettings %v", tc.name, cmds, tc.want)
		}
		if ok && ls != ledger.LogSettingsOf(local, now.UnixNano()) {
			t.Fatalf("%s: proposed %+v, want the local settings", tc.name, ls)
		}
	}
}
