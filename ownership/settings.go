package ownership

import (
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// logSettings proposes the settings the leader's replica applies with
// (Input.Settings) as ledger.LogSettings once the cluster runs
// ledger.VersionLogSettings and none are logged: from that entry on every
// replica judges entries with the same values, whatever its build's
// defaults. Nothing is proposed for settings that would not validate (an
// Input without them).
func logSettings(now time.Time, in Input) (ledger.LogSettings, bool) {
	if in.Cluster.Version < ledger.VersionLogSettings || in.Settings.Logged {
		return ledger.LogSettings{}, false
	}
	c := ledger.LogSettingsOf(in.Settings, now.UnixNano())
	if c.Validate() != nil {
		return ledger.LogSettings{}, false
	}
	return c, true
}
