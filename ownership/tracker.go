package ownership

import (
	"slices"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
)

// Tracker is the node-side lease and acting logic of docs/protocol.md: it
// decides, from this node's own ledger replica, its own heartbeats and its
// own monotonic clock, whether the node may act as owner of a shard right
// now. It is pure (time is passed in, no goroutines, no I/O) and not safe
// for concurrent use; node/ and the simulator drive this exact code.
//
// Driving it:
//   - every RenewEvery: HeartbeatAsked(now) gives the Heartbeat to propose;
//     report the outcome with HeartbeatAcked (committed and accepted, with
//     its log index and the resulting node record), HeartbeatRejected or
//     HeartbeatFailed (lost, or outcome unknown); under cluster version 4,
//     once Registered, RenewAsked instead, answered with RenewAcked (with
//     the leader's commit index), HeartbeatRejected or HeartbeatFailed;
//   - ClusterVersion with the version the replica shows, before Applied;
//   - for every entry the replica applies: ObserveShard/ObserveNode for the
//     records it changed, then Applied(index);
//   - after any of these and at NextDeadline: Changes(now) for the acting
//     set's transitions (start or cancel workers) and Handoffs(now) for the
//     Release/Transfer commands to propose.
type Tracker struct {
	cfg Config
	id  string
	inc uint64

	// liveness is the liveness epoch the current lease is for; leaseEnd is
	// the local time the lease ends (zero: no lease).
	liveness uint64
	leaseEnd time.Time
	// sendLiveness is what the next heartbeat carries: the current epoch
	// after an ack, 0 ("rejoin at the current epoch") at start and after a
	// rejection.
	sendLiveness uint64
	// fenced: a newer incarnation of this node is registered; this process
	// must never act again.
	fenced bool

	nextToken uint64
	asks      map[uint64]ask
	pending   []ackedHeartbeat
	applied   uint64
	// version is the cluster's active version as the replica shows it at
	// applied (ClusterVersion).
	version uint32

	self      ledger.NodeRecord
	selfKnown bool
	nodes     map[string]handoffTarget // every node record's fields a Transfer to it needs
	shards    map[uint32]*shardTrack
	reported  map[uint32]Change

	// Handoff on a word (cluster version 6, word.go): targeted holds the
	// records of other nodes' shards the replica shows Revoking toward
	// this node; words the words the leader relayed to it, with the local
	// time of the ask each answered (at most one per shard).
	targeted map[uint32]ledger.ShardRecord
	words    map[uint32]heldWord
}

// heldWord is a relayed word and the local time of the ask it answered.
type heldWord struct {
	w     Word
	asked time.Time
}

// MaxHeldWords bounds the words a tracker holds (one per shard; the
// leader relays only words for shards revoked toward the node).
const MaxHeldWords = 1 << 16

// ask is one heartbeat or renewal asked and not yet answered.
type ask struct {
	at time.Time
	// renewal: a renewal (cluster version 4) at liveness, not a heartbeat.
	renewal  bool
	liveness uint64
}

type ackedHeartbeat struct {
	index    uint64
	asked    time.Time
	acked    time.Time
	liveness uint64
	// renewal: a renewal's ack (index is the leader's commit index read
	// after receipt), not a log heartbeat's.
	renewal bool
}

type shardTrack struct {
	rec ledger.ShardRecord
	// For a Revoking record: when this node first saw the Revoke (local
	// clock) and whether it was acting then (only then may it drain).
	revokeSeen time.Time
	drainOK    bool
	drained    bool
	handoffAt  time.Time
	// resigned: the application gave the shard up at this epoch
	// (Election.Resign); the node never acts on it at this epoch again.
	resigned bool
}

// Change is one transition of the acting set, reported by Changes.
type Change struct {
	Shard uint32
	Epoch uint64
	// Acting: the node acts on the shard from now on (start workers); false:
	// it stopped (cancel the shard's workers now).
	Acting bool
	// Draining: the shard is Revoking; keep running workers only to finish,
	// until Deadline.
	Draining bool
	// Deadline is the local time acting ends unless the lease is renewed
	// (the lease end, or the drain deadline when Draining).
	Deadline time.Time
}

// NewTracker returns the tracker of one process lifetime (incarnation) of
// node id.
func NewTracker(cfg Config, id string, incarnation uint64) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{
		cfg: cfg, id: id, inc: incarnation,
		asks:     make(map[uint64]ask),
		nodes:    make(map[string]handoffTarget),
		shards:   make(map[uint32]*shardTrack),
		reported: make(map[uint32]Change),
		targeted: make(map[uint32]ledger.ShardRecord),
		words:    make(map[uint32]heldWord),
	}, nil
}

// ID returns the node id.
func (t *Tracker) ID() string { return t.id }

// Incarnation returns the process incarnation.
func (t *Tracker) Incarnation() uint64 { return t.inc }

// Liveness returns the liveness epoch of the current lease (0: none yet).
func (t *Tracker) Liveness() uint64 { return t.liveness }

// LeaseEnd returns the local time the current lease ends (zero: none).
func (t *Tracker) LeaseEnd() time.Time { return t.leaseEnd }

// Fenced reports whether a newer incarnation of this node was registered;
// a fenced tracker never acts again.
func (t *Tracker) Fenced() bool { return t.fenced }

// HeartbeatAsked records that the node asks for a lease renewal at local
// time now and returns the token to report the outcome with, and the
// command to propose.
func (t *Tracker) HeartbeatAsked(now time.Time) (token uint64, hb ledger.Heartbeat) {
	t.nextToken++
	t.asks[t.nextToken] = ask{at: now}
	return t.nextToken, ledger.Heartbeat{Node: t.id, Incarnation: t.inc, Liveness: t.sendLiveness, Now: now.UnixNano(),
		MinVersion: ledger.MinClusterVersion, MaxVersion: t.maxVersion()}
}

// maxVersion is the newest cluster version this node's heartbeats
// advertise.
func (t *Tracker) maxVersion() uint32 {
	return t.cfg.speakMax()
}

// Registered reports whether the replica shows this process registered as
// its last heartbeat left it: its own record at this incarnation, at the
// liveness epoch the last accepted heartbeat returned, with the version
// range its heartbeats advertise. Only then may it renew instead of
// heartbeating (cluster version 4).
func (t *Tracker) Registered() bool {
	s := t.self
	return t.selfKnown && !t.fenced && t.sendLiveness != 0 && s.Incarnation == t.inc && s.Liveness == t.sendLiveness &&
		s.MinVersion == ledger.MinClusterVersion && s.MaxVersion == t.maxVersion()
}

// RenewAsked records that the node asks for a lease renewal off the log at
// local time now (cluster version 4) and returns the token to report the
// outcome with and the renewal to send.
func (t *Tracker) RenewAsked(now time.Time) (token uint64, r RenewAsk) {
	t.nextToken++
	t.asks[t.nextToken] = ask{at: now, renewal: true, liveness: t.sendLiveness}
	return t.nextToken, RenewAsk{Token: t.nextToken, Node: t.id, Incarnation: t.inc, Liveness: t.sendLiveness}
}

// RenewAcked reports that a leader accepted the renewal of token after
// receiving it, confirmed its leadership with a quorum afterwards and read
// commitIndex after receipt. The lease is extended to ask time +
// Lease·(1−δ) once this node's replica has applied commitIndex, as for a
// heartbeat's index (rule 2).
func (t *Tracker) RenewAcked(token, commitIndex uint64, now time.Time) {
	a, ok := t.asks[token]
	delete(t.asks, token)
	if !ok || !a.renewal || t.fenced || a.liveness != t.sendLiveness {
		return // rejected or re-registered since the ask
	}
	t.pending = append(t.pending, ackedHeartbeat{index: commitIndex, asked: a.at, acked: now, liveness: a.liveness, renewal: true})
	t.flush()
}

// ClusterVersion reports the cluster's active version as this node's
// replica shows it; call it before Applied for the same entries. From
// VersionLeaseRenewals on, a heartbeat's ack no longer extends the lease.
func (t *Tracker) ClusterVersion(v uint32) { t.version = v }

// HeartbeatAcked reports that the heartbeat of token was committed at log
// index and accepted, leaving the node record rec. The lease is extended to
// ask time + Lease·(1−δ) only once this node's replica has applied index
// (Applied): only then has it seen every Revoke and ExpireNode committed
// before the heartbeat.
func (t *Tracker) HeartbeatAcked(token, index uint64, rec ledger.NodeRecord, now time.Time) {
	a, ok := t.asks[token]
	delete(t.asks, token)
	if !ok || a.renewal || rec.ID != t.id || rec.Incarnation != t.inc || t.fenced {
		return
	}
	if rec.Liveness >= t.sendLiveness {
		t.sendLiveness = rec.Liveness
	}
	t.pending = append(t.pending, ackedHeartbeat{index: index, asked: a.at, acked: now, liveness: rec.Liveness})
	t.flush()
}

// HeartbeatRejected reports that the heartbeat of token was committed and
// rejected, or its renewal refused as stale; rec is the current node record from the rejection. With a newer
// incarnation registered the tracker is fenced for good; otherwise the node
// was expired: it loses its lease and every shard granted under the old
// epoch at once, and the next heartbeat rejoins at the current epoch.
func (t *Tracker) HeartbeatRejected(token uint64, rec ledger.NodeRecord, now time.Time) {
	delete(t.asks, token)
	if rec.ID != t.id {
		return
	}
	if rec.Incarnation > t.inc {
		t.fenced = true
		t.leaseEnd = time.Time{}
		return
	}
	if rec.Incarnation == t.inc && rec.Liveness > t.liveness {
		t.leaseEnd = time.Time{}
		t.sendLiveness = 0
	}
}

// HeartbeatFailed reports that the heartbeat or renewal of token was lost
// or its outcome is unknown (ErrLeadershipLost): it extends nothing.
func (t *Tracker) HeartbeatFailed(token uint64) { delete(t.asks, token) }

// Applied reports that this node's replica has applied every entry up to
// index; call it after the Observe calls for those entries.
func (t *Tracker) Applied(index uint64) {
	if index > t.applied {
		t.applied = index
	}
	t.flush()
}

func (t *Tracker) flush() {
	keep := t.pending[:0]
	for _, a := range t.pending {
		skip := mutation.On(mutation.SkipApplyWait) && !a.renewal || mutation.On(mutation.RenewWithoutApplyWait) && a.renewal
		if a.index > t.applied && !skip {
			keep = append(keep, a)
			continue
		}
		if !a.renewal && t.version >= ledger.VersionLeaseRenewals {
			// Version 4: only renewals grant leases (a new leader's bound
			// covers confirmed renewals, not log heartbeats).
			continue
		}
		t.extend(a)
	}
	t.pending = keep
}

// extend applies one acknowledged and applied heartbeat: the lease runs to
// ask + Lease·(1−δ) — the ask, not the ack, because the ledger may have
// committed the heartbeat right after it was asked.
func (t *Tracker) extend(a ackedHeartbeat) {
	start, length := a.asked, t.cfg.nodeLease()
	if mutation.On(mutation.RenewFromAck) {
		start = a.acked
	}
	if mutation.On(mutation.NoDriftMargin) {
		length = t.cfg.Lease
	}
	end := start.Add(length)
	switch {
	case a.liveness > t.liveness:
		// A new liveness epoch: leases asked under the old one do not count.
		t.liveness, t.leaseEnd = a.liveness, end
	case a.liveness == t.liveness && end.After(t.leaseEnd):
		t.leaseEnd = end
	}
}

// ObserveNode reports a node record as this node's replica applied it.
func (t *Tracker) ObserveNode(rec ledger.NodeRecord) {
	// Only what a handoff to the node needs is kept: the tracker sees every
	// node's heartbeats, and most change none of it (one map read, no write).
	h := handoffTarget{Incarnation: rec.Incarnation, Liveness: rec.Liveness, Draining: rec.Draining}
	if old, ok := t.nodes[rec.ID]; !ok || old != h {
		t.nodes[rec.ID] = h
	}
	if rec.ID == t.id {
		t.self, t.selfKnown = rec, true
	}
}

// handoffTarget is what Handoffs needs of a node record.
type handoffTarget struct {
	Incarnation, Liveness uint64
	Draining              bool
}

// ObserveShard reports a shard record as this node's replica applied it, at
// local time now. A Revoke seen while acting opens the drain window of
// DrainTimeout·(1−δ); a node never starts acting on a Revoking shard.
func (t *Tracker) ObserveShard(now time.Time, rec ledger.ShardRecord) {
	prev := t.shards[rec.Shard]
	if rec.State == ledger.ShardRevoking && rec.Target == t.id && rec.Owner != t.id {
		t.targeted[rec.Shard] = rec
	} else {
		delete(t.targeted, rec.Shard)
	}
	if w, ok := t.words[rec.Shard]; ok && rec.Epoch > w.w.Epoch {
		delete(t.words, rec.Shard) // the shard moved past the word's epoch
	}
	if rec.Owner != t.id {
		delete(t.shards, rec.Shard)
		return
	}
	st := &shardTrack{rec: rec}
	if prev != nil && prev.rec.Epoch == rec.Epoch && prev.rec.State == rec.State {
		st = prev
		st.rec = rec
	} else if rec.State == ledger.ShardRevoking {
		if prev != nil && prev.rec.Epoch == rec.Epoch && prev.rec.State == ledger.ShardRevoking {
			st = prev
			st.rec = rec
		} else {
			st.revokeSeen = now
			st.drainOK = (prev != nil && t.acting(prev, now)) || mutation.On(mutation.ActOnRevoking)
		}
	}
	if prev != nil && prev != st && prev.rec.Epoch == rec.Epoch {
		st.resigned = prev.resigned
	}
	t.shards[rec.Shard] = st
}

// Drained reports that the application finished draining shard at epoch
// (its workers returned): the node stops acting on it and hands it over.
func (t *Tracker) Drained(shard uint32, epoch uint64) {
	if st := t.shards[shard]; st != nil && st.rec.Epoch == epoch && st.rec.State == ledger.ShardRevoking {
		st.drained = true
	}
}

// Resigned reports that the application gave shard up at epoch: the node
// stops acting on it at once and never acts on it at that epoch again (a
// new epoch, even granted back to this node, is a new ownership).
func (t *Tracker) Resigned(shard uint32, epoch uint64) {
	if st := t.shards[shard]; st != nil && st.rec.Epoch == epoch {
		st.resigned = true
	}
}

// Acting reports whether this node may act as owner of shard at local time
// now (docs/protocol.md, node side, rule 4), or on the old owner's word
// (cluster version 6).
func (t *Tracker) Acting(shard uint32, now time.Time) bool {
	_, ok := t.current(shard, now)
	return ok
}

// Word records a word the leader relayed in answer to the ask this node
// sent at local time asked (cluster version 6). Words for other nodes, for
// shards already past the word's epoch, and beyond MaxHeldWords are
// dropped; a later word for the same shard replaces an earlier one.
func (t *Tracker) Word(w Word, asked time.Time) {
	if w.To != t.id || t.fenced {
		return
	}
	if rec, ok := t.targeted[w.Shard]; ok && rec.Epoch != w.Epoch {
		return
	}
	if _, had := t.words[w.Shard]; !had && len(t.words) >= MaxHeldWords {
		return
	}
	t.words[w.Shard] = heldWord{w: w, asked: asked}
}

// wordChange is the acting change of shard on a held word at now, if the
// node may act on it (WordActing): at the word's epoch+1, with the word's
// end as deadline. Only while the node holds its own lease, registered
// at this incarnation and liveness epoch.
func (t *Tracker) wordChange(shard uint32, now time.Time) (Change, bool) {
	hw, ok := t.words[shard]
	if !ok || t.fenced || !t.selfKnown || t.self.Incarnation != t.inc || t.self.Liveness != t.liveness || t.self.Draining {
		return Change{}, false
	}
	rec, ok := t.targeted[shard]
	if !ok {
		return Change{}, false
	}
	until, ok := WordActing(t.cfg, t.id, t.version, hw.w, hw.asked, rec, t.leaseEnd, now)
	if !ok {
		return Change{}, false
	}
	return Change{Shard: shard, Epoch: hw.w.Epoch + 1, Acting: true, Deadline: until}, true
}

// current is the acting change of shard at now: as its owner, or on a
// word.
func (t *Tracker) current(shard uint32, now time.Time) (Change, bool) {
	if st := t.shards[shard]; st != nil {
		if !t.acting(st, now) {
			return Change{}, false
		}
		return Change{Shard: shard, Epoch: st.rec.Epoch, Acting: true,
			Draining: st.rec.State == ledger.ShardRevoking, Deadline: t.deadline(st)}, true
	}
	return t.wordChange(shard, now)
}

// OnWord reports whether the node acts on shard at now on a word rather
// than as its committed owner.
func (t *Tracker) OnWord(shard uint32, now time.Time) bool {
	if t.shards[shard] != nil {
		return false
	}
	_, ok := t.wordChange(shard, now)
	return ok
}

// pruneWords drops the words whose bound has passed at now.
func (t *Tracker) pruneWords(now time.Time) {
	for s, hw := range t.words {
		if !now.Before(WordUntil(t.cfg, hw.w, hw.asked)) {
			delete(t.words, s)
		}
	}
}

// holds reports whether the replica shows the shard validly owned by this
// process under the liveness epoch of its current lease.
func (t *Tracker) holds(st *shardTrack) bool {
	r := st.rec
	return !t.fenced && r.Owner == t.id && r.OwnerIncarnation == t.inc && r.OwnerLiveness == t.liveness &&
		t.selfKnown && ledger.OwnershipValidWith(r, t.self, true)
}

func (t *Tracker) acting(st *shardTrack, now time.Time) bool {
	if !t.holds(st) || st.resigned {
		return false
	}
	if !now.Before(t.leaseEnd) && !(mutation.On(mutation.DrainIgnoresLease) && st.rec.State == ledger.ShardRevoking && st.drainOK) {
		return false
	}
	switch st.rec.State {
	case ledger.ShardOwned:
		return true
	case ledger.ShardRevoking:
		if !st.drainOK || st.drained {
			return false
		}
		return now.Before(st.drainEnd(t.cfg)) || mutation.On(mutation.IgnoreDrainDeadline)
	}
	return false
}

func (st *shardTrack) drainEnd(cfg Config) time.Time { return st.revokeSeen.Add(cfg.nodeDrain()) }

// deadline is when acting on st ends unless something changes.
func (t *Tracker) deadline(st *shardTrack) time.Time {
	d := t.leaseEnd
	if st.rec.State == ledger.ShardRevoking && mutation.On(mutation.DrainIgnoresLease) {
		return st.drainEnd(t.cfg)
	}
	if st.rec.State == ledger.ShardRevoking && !mutation.On(mutation.IgnoreDrainDeadline) {
		if e := st.drainEnd(t.cfg); e.Before(d) {
			d = e
		}
	}
	return d
}

// NextDeadline returns the earliest local time after now at which the
// acting set can change without any input (a lease or drain deadline), or
// the zero time if there is none. Call Changes and Handoffs then.
func (t *Tracker) NextDeadline(now time.Time) time.Time {
	var next time.Time
	for _, st := range t.shards {
		if !t.acting(st, now) {
			continue
		}
		if d := t.deadline(st); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	for s := range t.words {
		if c, ok := t.wordChange(s, now); ok && (next.IsZero() || c.Deadline.Before(next)) {
			next = c.Deadline
		}
	}
	return next
}

// ActingShards returns the shards this node acts on at now, sorted.
func (t *Tracker) ActingShards(now time.Time) []uint32 {
	var out []uint32
	for s, st := range t.shards {
		if t.acting(st, now) {
			out = append(out, s)
		}
	}
	for s := range t.words {
		if t.OnWord(s, now) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Changes returns the transitions of the acting set since the last call,
// sorted by shard: a stop before a start for the same shard.
func (t *Tracker) Changes(now time.Time) []Change {
	var out []Change
	t.pruneWords(now)
	report := func(c Change) {
		old, had := t.reported[c.Shard]
		switch {
		case !had:
			out = append(out, c)
		case old.Epoch != c.Epoch:
			out = append(out, Change{Shard: c.Shard, Epoch: old.Epoch}, c)
		case old.Draining != c.Draining || !old.Deadline.Equal(c.Deadline):
			out = append(out, c)
		default:
			return
		}
		t.reported[c.Shard] = c
	}
	for s := range t.words {
		if c, ok := t.wordChange(s, now); ok && t.shards[s] == nil {
			report(c)
		}
	}
	for s, st := range t.shards {
		if !t.acting(st, now) {
			continue
		}
		report(Change{Shard: s, Epoch: st.rec.Epoch, Acting: true,
			Draining: st.rec.State == ledger.ShardRevoking, Deadline: t.deadline(st)})
	}
	for s, old := range t.reported {
		if _, ok := t.current(s, now); ok {
			continue
		}
		delete(t.reported, s)
		out = append(out, Change{Shard: s, Epoch: old.Epoch})
	}
	slices.SortStableFunc(out, func(a, b Change) int {
		if a.Shard != b.Shard {
			if a.Shard < b.Shard {
				return -1
			}
			return 1
		}
		if a.Acting == b.Acting {
			return 0
		}
		if !a.Acting {
			return -1
		}
		return 1
	})
	return out
}

// Handoffs returns the Release or Transfer commands to propose at now for
// Revoking shards this node no longer acts on (drained, drain deadline
// passed, or never acting), sorted by shard. A shard is offered again after
// RenewEvery if its record has not changed (the proposal was lost). The
// shard goes to the Revoke's target with a Transfer when the replica knows
// the target and it is not draining; otherwise it is Released.
func (t *Tracker) Handoffs(now time.Time) []ledger.Command {
	var shards []uint32
	for s, st := range t.shards {
		if st.rec.State != ledger.ShardRevoking || !t.holds(st) || t.acting(st, now) || mutation.On(mutation.NoHandoff) {
			continue
		}
		if !st.handoffAt.IsZero() && now.Sub(st.handoffAt) < t.cfg.RenewEvery {
			continue
		}
		shards = append(shards, s)
	}
	slices.Sort(shards)
	out := make([]ledger.Command, 0, len(shards))
	for _, s := range shards {
		st := t.shards[s]
		st.handoffAt = now
		// Once the handoff is proposed, the successor may act as soon as it
		// commits: this node must never act on the shard at this epoch
		// again, even if a renewal would reopen its lease within the drain
		// window (docs/protocol.md, node side, rule 5).
		st.drained = !mutation.On(mutation.ResumeAfterHandoff)
		r := st.rec
		to, known := t.nodes[r.Target]
		// Under version 6 a shard revoked toward a target leaves by the
		// Transfer to it and nothing else, even to a draining target (it
		// hands the shard on when revoked in turn): the Transfer may have
		// been relayed as this node's word — by this process or an
		// earlier one of the same incarnation — and a Release, which the
		// planner may grant elsewhere at once, must never follow it (rule
		// 3 of the handoff on a word).
		words := t.version >= ledger.VersionHandoffWords && r.Target != "" && r.Target != t.id
		if words && !known {
			continue // the replica does not show the target yet: offer again later (or the takeover)
		}
		if known && r.Target != t.id && (!to.Draining || words) {
			// The revocation's reason travels on ("handoff: pinned to n3"),
			// so the move shows why it happened (tenure moves).
			reason := "handoff"
			if r.Reason != "" {
				reason += ": " + r.Reason
			}
			out = append(out, ledger.Transfer{Shard: s, Epoch: r.Epoch, From: t.id, To: r.Target,
				ToIncarnation: to.Incarnation, ToLiveness: to.Liveness, Now: now.UnixNano(), Reason: reason})
			continue
		}
		out = append(out, ledger.Release{Shard: s, Epoch: r.Epoch, Owner: t.id, Now: now.UnixNano()})
	}
	return out
}
