package ownership

import (
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
)

// The handoff on the old owner's word (cluster version 6,
// ledger.VersionHandoffWords; docs/guarantees.md). A planned move commits
// a Revoke naming its target T while the old owner O still acts. O stops
// (its workers return) and proposes the Transfer; the control-group leader
// that receives it over its authenticated RPC (the certificate proves O)
// relays O's word — "O stopped acting on the shard at epoch e" — to T, in
// the answer to a request T sent (a long poll, WordAsk). T acts at e+1 on
// the word, before the Transfer commits, while:
//
//  1. its own replica shows the shard Revoking from O at e toward T, and T
//     holds its own lease; and the word is still valid: the leader bounds,
//     on its clock, how long the shard cannot leave O other than by the
//     Transfer (Word.Valid: what remains of its takeover wait), and T
//     counts that bound from its own ask, scaled by (1−δ)/(1+δ)
//     (WordUntil) — the ask precedes the leader's reading, as a lease
//     counts from the heartbeat's ask;
//  2. a shard revoked toward a target that leaves O other than by the
//     Transfer burns e+1 (ledger.HandoffEpoch): the token T may have used
//     is never issued to anyone else;
//  3. one word per (shard, e), to one target: O's handoff of an epoch is
//     decided once (a Transfer to the Revoke's target or a Release, never
//     one then the other: Tracker.Handoffs), and the planner grants a
//     shard revoked toward a target elsewhere only after the takeover
//     wait, even when O's ownership became invalid (an expiry, a restart):
//     the wait every word's bound is cut from (Planner.WordValid).

// Word is the old owner's word, as the leader relays it to the target.
type Word struct {
	Shard uint32
	// Epoch is the epoch the old owner stopped acting at; the target acts
	// at Epoch+1.
	Epoch uint64
	From  string
	To    string
	// Valid is the leader's bound, read after it received the target's
	// ask: for at least this long on the leader's clock, the shard leaves
	// From only by the Transfer to To.
	Valid time.Duration
}

// WordAsk is a request for words to send to the control-group leader
// (cluster version 6); report its answer with a WordOutcome carrying
// Token. The leader answers as soon as it holds a word for the node, or
// empty after a while.
type WordAsk struct {
	Token uint64
	Node  string
}

// WordOutcome reports the answer to the WordAsk of Token: the words the
// leader relayed (Err nil), or a failure.
type WordOutcome struct {
	Token uint64
	Words []Word
	Err   error
}

func (WordOutcome) agentInput() {}

// WordUntil is the local time until which a node may act on w, which
// answered the ask it sent at local time asked: asked + Valid·(1−δ)/(1+δ),
// Valid at most the takeover wait (Lease+Drain)·(1+δ).
// The leader read Valid after receiving the ask, so on any clock whose
// rate is within δ the leader's bound ends no earlier. This is rule 1 of
// the handoff on a word; the one place its clock is decided.
func WordUntil(cfg Config, w Word, asked time.Time) time.Time {
	// No leader's wait is longer than the takeover wait: a larger Valid
	// (a bug, a peer with another config) is cut to it.
	valid := min(w.Valid, cfg.TakeoverAfter())
	return asked.Add(scale(valid, (1-cfg.MaxDrift)/(1+cfg.MaxDrift)))
}

// WordActing is the decision "may node self act on shard rec.Shard at
// epoch w.Epoch+1 on the word w at now": rec is the shard as self's
// replica shows it, version the cluster's active version there, leaseEnd
// self's own lease end (zero: none), asked the local time self sent the
// ask w answered. It returns the local time acting on the word ends
// unless the Transfer applies first: the word's bound or the lease end,
// whichever is earlier. Pure; the agent (node/ and the simulator) calls
// it for every word it holds.
func WordActing(cfg Config, self string, version uint32, w Word, asked time.Time, rec ledger.ShardRecord,
	leaseEnd, now time.Time) (until time.Time, ok bool) {
	if version < ledger.VersionHandoffWords || w.To != self || w.From == self || w.From == "" {
		return time.Time{}, false
	}
	if rec.Shard != w.Shard || rec.State != ledger.ShardRevoking || rec.Epoch != w.Epoch || rec.Owner != w.From || rec.Target != self {
		return time.Time{}, false
	}
	until = WordUntil(cfg, w, asked)
	if mutation.On(mutation.WordPastLease) || until.After(leaseEnd) {
		until = leaseEnd
	}
	return until, now.Before(until)
}
