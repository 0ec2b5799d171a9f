// Re-entry after a restart: how long a node that registered a new
// incarnation waits before it enters the placement ring again (moved out of
// planner.go, which Planner.buildRing's eligibility pass calls into).

package ownership

import "time"

// entryWait is how long node id must have been eligible before it enters
// the placement ring: StableFor, or reentryWait for a node that restarted
// (registered a new incarnation this term), has not been in the ring since,
// and renewed its new lease with this leader at least once after the
// registration. It is never above StableFor.
func (p *Planner) entryWait(id string) time.Duration {
	tr := p.nodes[id]
	if tr == nil || !tr.reentry || !tr.lastSeen.After(tr.restartedAt) {
		return p.cfg.StableFor
	}
	return reentryWait(p.cfg.StableFor, tr.strikes)
}

// Re-entry after a restart (docs/protocol.md, "Re-entry after a restart").
// StableFor keeps a node whose gossip flaps, or that just appeared, out of
// the ring until it has been eligible for a while. A node that comes back
// with a new incarnation after its place was lost (it was expired while
// down, or drained before a restart) has proved more than that: the ledger
// committed its registration and the leader has seen it renew since. So
// its first restart in a while re-enters at once, and only restarts that
// follow each other within reentryWindow (a crash loop) wait again, longer
// with each strike, up to StableFor. What it gets back is its ring share,
// moved by planned handoffs (Revoke, drained, Transfer) within the churn
// budget, never by waiting out a lease. Quick restarts, before the lease
// expired, never lose their place and take no path through here.

// reentryWindow is how soon after a node's previous restart another one
// counts as a strike: 10·StableFor (30 s in the default profile).
func reentryWindow(stableFor time.Duration) time.Duration { return 10 * stableFor }

// maxStrikes is the strike count from which a restarted node waits the full
// StableFor.
const maxStrikes = 3

// reentryWait is how long a node re-entering after a restart must have been
// eligible: 0 with no strike, then StableFor/4, StableFor/2, and StableFor
// from maxStrikes strikes on (never more, so a crash-looping node waits what
// any joiner waits).
func reentryWait(stableFor time.Duration, strikes int) time.Duration {
	if strikes <= 0 {
		return 0
	}
	return stableFor >> (maxStrikes - min(strikes, maxStrikes))
}

// restarted records that the node registered a new incarnation at now: a
// strike if its previous restart was less than reentryWindow ago, otherwise
// a clean slate.
func (tr *nodeTrack) restarted(now time.Time, stableFor time.Duration) {
	if !tr.restartedAt.IsZero() && now.Sub(tr.restartedAt) < reentryWindow(stableFor) {
		tr.strikes = min(tr.strikes+1, maxStrikes)
	} else {
		tr.strikes = 0
	}
	tr.restartedAt, tr.reentry = now, true
}
