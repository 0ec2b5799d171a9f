// Package mutation holds the switches that disable one safety rule each in
// the real code (ownership, ledger). They exist only so that the simulator's
// tests can prove the harness catches every broken rule; production code
// never sets them, and they are off by default. Being internal, they are
// not part of tenure's public API.
package mutation

import "sync/atomic"

// Switch names one disabled safety rule.
type Switch int32

// The switches. Each disables exactly one rule of docs/protocol.md.
const (
	// None: every rule in force.
	None Switch = iota
	// SkipExpiryWait: the planner expires a node without waiting
	// Lease·(1+δ) since its last heartbeat.
	SkipExpiryWait
	// SkipTakeoverWait: the planner grants a Revoking shard away without
	// waiting (Lease+Drain)·(1+δ) since it saw the Revoke.
	SkipTakeoverWait
	// RenewFromAck: the tracker counts the lease from when the heartbeat was
	// acknowledged instead of when it was asked.
	RenewFromAck
	// ResumeAfterHandoff: the tracker may act on a Revoking shard again
	// after it proposed its Release/Transfer, if a renewal reopens its lease
	// within the drain window (the protocol flaw the simulator found).
	ResumeAfterHandoff
	// SkipApplyWait: the tracker extends its lease on a heartbeat ack before
	// its own replica has applied the heartbeat's log index.
	SkipApplyWait
	// IgnoreEstablish: a new leader does not wait out leases and drains it
	// could not see: it treats every node as last seen, and every Revoke as
	// seen, a full wait before it became leader.
	IgnoreEstablish
	// NoDriftMargin: the tracker counts its lease as the full Lease instead
	// of Lease·(1−δ), and the leader waits only Lease.
	NoDriftMargin
	// AcceptStaleEpoch: the ledger accepts a Grant whose expected epoch is
	// not the shard's current epoch.
	AcceptStaleEpoch
	// IgnoreDrainDeadline: the tracker keeps acting on a Revoking shard past
	// its drain deadline.
	IgnoreDrainDeadline
	numSwitches
)

var names = [...]string{"none", "skip-expiry-wait", "skip-takeover-wait", "renew-from-ack",
	"resume-after-handoff", "skip-apply-wait", "ignore-establish", "no-drift-margin",
	"accept-stale-epoch", "ignore-drain-deadline"}

// String names the switch.
func (s Switch) String() string {
	if s < 0 || s >= numSwitches {
		return "unknown"
	}
	return names[s]
}

// All lists every switch except None.
func All() []Switch {
	out := make([]Switch, 0, numSwitches-1)
	for s := None + 1; s < numSwitches; s++ {
		out = append(out, s)
	}
	return out
}

var active atomic.Int32

// Set turns on exactly one switch (None turns all off) and returns a
// function that restores the previous one.
func Set(s Switch) (restore func()) {
	prev := active.Swap(int32(s))
	return func() { active.Store(prev) }
}

// On reports whether switch s is on. It is one atomic load.
func On(s Switch) bool { return Switch(active.Load()) == s }
