package node

import (
	"slices"
	"strings"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ownership"
)

// The profile table: the one place that says which settings of every layer
// a Profile selects. Each layer keeps its named profiles next to the code
// they tune (ownership.FastConfig, cluster.DefaultLocalConfig,
// cluster.FastControlConfig, ...); a row names the ones that go together,
// and everything else is derived from the row: Profile.Timing (the lease
// the node's guard and workers use) is read from the ownership column — the
// very Config the tracker and the planner run with — so the two cannot
// disagree. TestProfileTable checks the rows against each other and against
// docs/protocol.md.
type profileRow struct {
	// ownership: lease timing (Lease, RenewEvery, MaxDrift, DrainTimeout),
	// churn budget and hysteresis of the tracker and the planner.
	ownership func() ownership.Config
	// membership: gossip failure detection (memberlist probe timings).
	membership func() cluster.Config
	// control: the control group's Raft timings.
	control func() cluster.ControlConfig
}

var profileTable = map[Profile]profileRow{
	ProfileFast:    {ownership: ownership.FastConfig, membership: cluster.DefaultLocalConfig, control: cluster.FastControlConfig},
	ProfileDefault: {ownership: ownership.DefaultConfig, membership: cluster.DefaultLANConfig, control: cluster.DefaultControlConfig},
	ProfileSafe:    {ownership: ownership.SafeConfig, membership: cluster.DefaultLANConfig, control: cluster.DefaultControlConfig},
}

// row returns p's row of the profile table; "" is ProfileDefault.
func (p Profile) row() (profileRow, bool) {
	if p == "" {
		p = ProfileDefault
	}
	r, ok := profileTable[p]
	return r, ok
}

// Profiles lists the known profiles, shortest lease first.
func Profiles() []Profile {
	out := make([]Profile, 0, len(profileTable))
	for p := range profileTable {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Profile) int {
		ta, _ := a.Timing()
		tb, _ := b.Timing()
		if ta.Lease != tb.Lease {
			return int(ta.Lease - tb.Lease)
		}
		return strings.Compare(string(a), string(b))
	})
	return out
}

// Timing returns the profile's timing parameters, and false for an unknown
// profile. They are the ownership column of the profile table.
func (p Profile) Timing() (Timing, bool) {
	r, ok := p.row()
	if !ok {
		return Timing{}, false
	}
	return timingOf(r.ownership()), true
}

// timingOf is the lease timing of an ownership configuration.
func timingOf(oc ownership.Config) Timing {
	return Timing{Lease: oc.Lease, RenewEvery: oc.RenewEvery, MaxDrift: oc.MaxDrift, DrainTimeout: oc.DrainTimeout}
}
