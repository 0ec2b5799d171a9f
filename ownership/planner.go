package ownership

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ring"
)

// Planner is the leader-side decision core: a pure state machine that turns
// (membership view, committed table, now) into ledger proposals. It reads no
// clock, starts no goroutines and does no I/O; node's leaderLoop (or the
// simulator) feeds it. It is not safe for concurrent use.
//
// Where each decision is made:
//   - Establish: what a new leader assumes about leases it cannot see.
//   - observe:   lastSeen / revokeSeen bookkeeping from the committed table.
//   - expiries:  when a node's liveness is expired (lease rule).
//   - updateRing: who is in the placement ring (eligibility, hysteresis,
//     stickiness).
//   - buildRing: where every partition should be (ring.Assign over the
//     committed owners: sticky, balanced, one move per change).
//   - placement: grants, takeovers and revokes (churn budget).
//
// A round that expires nodes proposes the ExpireNode commands first, then
// the grants, takeovers and revokes planned on the table as it will be once
// they applied (expireView: the expired nodes' shards are invalid, the
// nodes themselves out of the ring), so one Batch commits a failover's
// expiry and its grants; a cluster configuration or log settings change
// waits for a round without expiries. Shard changes touch disjoint
// shards. Every proposal is a compare-and-set on what the planner saw, so a
// proposal that loses a race, or is retried after ErrLeadershipLost, fails
// harmlessly in the ledger.
type Planner struct {
	cfg     Config
	leading bool

	nodes   map[string]*nodeTrack
	revokes map[uint32]revokeTrack
	elig    map[string]*eligTrack
	epochs  map[uint32]uint64 // each shard's epoch in the last table observed (WordValid)

	ringKey []string // placement members, sorted
	assign  []string // this round's ring.Assign result, by partition

	attrOf         map[string]memberAttrs // last gossiped group, zone and weight of each node (elections.go)
	electionTarget map[uint32]string      // this round's election placement (elections.go)

	establishedAt time.Time // when this term's Establish ran
	plannedAt     time.Time // the now of the last Plan (NextDeadline)
	fencedOn      bool      // the last Plan's input had fenced ranges

	unsettledAt time.Time   // last round whose placement was not settled (load.go)
	swapsAt     []time.Time // load swaps started in the last minute
	lastSwap    ring.Swap
}

// nodeTrack is the leader's memory of one node record.
type nodeTrack struct {
	inc, liveness, seq uint64
	// lastSeen is the leader's clock when it last observed a heartbeat of
	// this node apply (or when it became leader: it honours leases it could
	// not see by waiting them out in full).
	lastSeen time.Time
	// expired: the liveness epoch moved without a heartbeat (ExpireNode
	// applied); the node holds no lease until it heartbeats again.
	expired bool
	// expiring: this planner proposed ExpireNode at liveness expiringAt and
	// has not yet seen the record move; it accepts no renewal at that epoch
	// meanwhile (Renew, ErrExpiring).
	expiring   bool
	expiringAt uint64
	// Restart memory (re-entry, reentryWait): restartedAt is when this
	// term saw the node register a new incarnation (zero: not seen);
	// reentry, that it has not been in the placement ring since; strikes,
	// how many restarts in a row each followed the one before within
	// reentryWindow (a crash loop).
	restartedAt time.Time
	reentry     bool
	strikes     int
}

type revokeTrack struct {
	epoch uint64
	seen  time.Time // leader's clock when it observed the Revoke
}

// eligTrack is the hysteresis state of one node.
type eligTrack struct {
	inRing   bool
	since    time.Time // start of the current eligible streak (zero: none)
	badSince time.Time // start of the current soft-ineligible streak
}

// NewPlanner returns a follower planner; call Establish when this node
// becomes the control group's leader.
func NewPlanner(cfg Config) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Planner{cfg: cfg}, nil
}

// Config returns the planner's configuration.
func (p *Planner) Config() Config { return p.cfg }

// Leading reports whether Establish was called without a later StepDown.
func (p *Planner) Leading() bool { return p.leading }

// Establish starts a leadership term at now (the leader's monotonic clock),
// after the leader's replica has applied every entry committed before its
// term (a Raft Barrier). The new leader cannot know when the nodes last
// heartbeated or renewed, so it treats every node as last seen at bound:
// the earliest time (leader's clock) before which every lease any earlier
// leader granted was asked (docs/protocol.md, leader side, establish; the
// shell computes it from the voters' confirm records, cluster version 4).
// A zero bound, or one after now, means now: the node waits every lease out
// in full, as before version 4. After an election that outlasted the lease
// (bound more than Lease·(1+δ) − establishGrace old), every node counts as
// seen establishGrace before its expiry instead: it gets that long to renew
// with the new leader (liveness only; later only lengthens the waits).
// Every Revoking shard counts as revoked at
// now. Nodes that own a validly owned shard, or are the target of a valid
// Revoking one, start in the placement ring (no movement on a leader
// change); other nodes must be eligible for StableFor first.
func (p *Planner) Establish(now time.Time, in Input, bound time.Time) {
	p.leading = true
	p.establishedAt, p.plannedAt, p.fencedOn = now, now, len(in.Fenced) > 0
	p.unsettledAt, p.swapsAt = now, nil
	p.nodes = make(map[string]*nodeTrack)
	p.revokes = make(map[uint32]revokeTrack)
	p.elig = make(map[string]*eligTrack)
	p.epochs = make(map[uint32]uint64)
	p.ringKey, p.assign = nil, nil

	seen, revoked := now, now
	if !bound.IsZero() && bound.Before(now) {
		seen = bound
	}
	// A node that renews with this leader promptly is never expired for
	// the time the election took: every node counts as seen no earlier
	// than establishGrace before the expiry wait would end now. Only
	// ever later than the bound, so only ever longer waits (safe).
	if g := now.Add(p.cfg.establishGrace() - p.expireAfter()); seen.Before(g) {
		seen = g
	}
	if mutation.On(mutation.EstablishIgnoresBound) {
		seen = seen.Add(-p.cfg.Lease)
	}
	if mutation.On(mutation.IgnoreEstablish) {
		seen, revoked = now.Add(-p.cfg.ExpireAfter()), now.Add(-p.cfg.TakeoverAfter())
	}
	t := newTable(in.Shards, in.Nodes)
	for _, id := range t.ids {
		n := t.nodes[id]
		p.nodes[id] = &nodeTrack{inc: n.Incarnation, liveness: n.Liveness, seq: n.Seq, lastSeen: seen}
	}
	for s, rec := range t.shards {
		p.epochs[s] = rec.Epoch
		if rec.State == ledger.ShardRevoking {
			p.revokes[s] = revokeTrack{epoch: rec.Epoch, seen: revoked}
		}
		if t.valid(rec) && p.elig[rec.Owner] == nil {
			p.elig[rec.Owner] = &eligTrack{inRing: true, since: now}
		}
		// The target of a planned move was in the last leader's ring too:
		// without this, a joiner whose first shards are still Revoking
		// would wait StableFor again and those shards would move back and
		// forth (two moves for one join).
		if _, known := t.nodes[rec.Target]; known && rec.State == ledger.ShardRevoking && t.valid(rec) && p.elig[rec.Target] == nil {
			p.elig[rec.Target] = &eligTrack{inRing: true, since: now}
		}
	}
}

// NextDeadline returns the earliest time, on the leader's clock and after
// the last Plan's now, at which a wait of this term ends: a node's expiry
// (lastSeen + Lease·(1+δ)), a Revoking shard's takeover
// ((Lease+Drain)·(1+δ) after the Revoke was seen) or, while shards are
// fenced, a node's FencedAfter. A round at that time makes the decision,
// so the shell (node's leaderLoop, the simulator) wakes then instead of at its
// next periodic round: detecting an expiry adds no delay. Renewals only
// move deadlines later, so a wake set from an earlier answer is early at
// worst (one more round). Zero when not leading or nothing is pending.
func (p *Planner) NextDeadline() time.Time {
	if !p.leading {
		return time.Time{}
	}
	var next time.Time
	consider := func(t time.Time) {
		if t.After(p.plannedAt) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, tr := range p.nodes {
		if tr.expired || tr.expiring {
			continue
		}
		consider(tr.lastSeen.Add(p.expireAfter()))
		if p.fencedOn {
			consider(p.fencedSeen(tr).Add(p.cfg.fencedAfter()))
		}
	}
	for _, r := range p.revokes {
		consider(r.seen.Add(p.takeoverAfter()))
	}
	return next
}

// StepDown ends the leadership term and forgets all term state.
func (p *Planner) StepDown() {
	p.leading = false
	p.nodes, p.revokes, p.elig, p.epochs = nil, nil, nil, nil
	p.ringKey, p.assign = nil, nil
}

// RingMembers returns the current placement ring members, sorted.
func (p *Planner) RingMembers() []string { return slices.Clone(p.ringKey) }

// Plan runs one round at now and returns the proposals, sorted (expiries by
// node id, then shard changes by shard, then forgets); they must be
// committed in that order (one Batch, or one by one): a grant of an
// expired node's shard is valid only after its ExpireNode applied. It
// returns nil when not leading. The error reports a placement ring that
// cannot be built (a configuration problem such as more ring members than
// partitions); expiries are still proposed in that case.
func (p *Planner) Plan(now time.Time, in Input) ([]ledger.Command, error) {
	if !p.leading {
		return nil, nil
	}
	t := newTable(in.Shards, in.Nodes)
	t.groups = p.groupView(in, t)
	t.pins, t.excluded = make(map[uint32]string, len(in.Pins)), make(map[string]bool, len(in.Excluded))
	for _, pin := range in.Pins {
		t.pins[pin.Shard] = pin.Node
	}
	for _, e := range in.Excluded {
		t.excluded[e.Node] = true
	}
	t.fenced = newFencedView(in)
	t.words = max(in.Cluster.Version, 1) >= ledger.VersionHandoffWords
	p.plannedAt, p.fencedOn = now, len(in.Fenced) > 0
	p.observe(now, t)
	exp := p.expiries(now, t)
	if len(exp) == 0 {
		if c, ok := p.clusterConfig(now, in.Cluster, in.Members, t); ok {
			return []ledger.Command{c}, nil
		}
		if c, ok := logSettings(now, in); ok {
			return []ledger.Command{c}, nil
		}
	} else {
		// Plan the rest of the round on the table as it will be once the
		// expiries applied (they are proposed first): the expired nodes'
		// shards are granted in this round, not the next.
		t.expireView(exp)
	}
	p.updateRing(now, t, sortedMembers(in.Members))
	if err := p.buildRing(t); err != nil {
		return exp, err
	}
	return append(exp, append(p.placement(now, t), p.forgets(now, in, t)...)...), nil
}

// forgets proposes ForgetNode for every node the leader expired at least
// ForgetAfter ago (by its clock, since it became leader at the earliest),
// that gossip does not show alive and that no shard names, once the
// cluster runs ledger.VersionForgetNodes. The FSM re-checks the record
// (a CAS on incarnation, liveness and seq: a heartbeat that lands first
// keeps the node) and the shards. A record whose incarnation is not below
// the table's applied index is left alone (the FSM would refuse it).
func (p *Planner) forgets(now time.Time, in Input, t table) []ledger.Command {
	if p.cfg.ForgetAfter <= 0 || in.Applied == 0 || max(in.Cluster.Version, 1) < ledger.VersionForgetNodes {
		return nil
	}
	named := make(map[string]bool)
	for _, rec := range t.shards {
		if rec.State != ledger.ShardUnowned {
			named[rec.Owner] = true
		}
		if rec.Target != "" {
			named[rec.Target] = true
		}
	}
	for _, m := range in.Members {
		if m.State.Up() {
			named[m.ID] = true
		}
	}
	var out []ledger.Command
	for _, id := range t.ids {
		tr, n := p.nodes[id], t.nodes[id]
		if tr == nil || !tr.expired || now.Sub(tr.lastSeen) < p.cfg.ForgetAfter || named[id] || n.Incarnation >= in.Applied {
			continue
		}
		out = append(out, ledger.ForgetNode{Node: id, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq, Now: now.UnixNano()})
	}
	return out
}

// clusterConfig proposes the cluster's first configuration, or a raise of
// its version when every node that counts speaks a newer one (and
// finalizing is automatic). A node counts while it holds a lease, and also
// while gossip shows it up at its registered incarnation: a node of the
// previous release whose lease lapsed for a moment (a starved process, a
// pause) is still running, and finalizing past it would halt its replica
// at the ClusterConfig and close the window to go back. The FSM re-checks
// what it must.
func (p *Planner) clusterConfig(now time.Time, cur ledger.ClusterInfo, members []Member, t table) (ledger.ClusterConfig, bool) {
	if p.cfg.ClusterName == "" {
		return ledger.ClusterConfig{}, false
	}
	gossip := map[string]Member{}
	for _, m := range members {
		gossip[m.ID] = m
	}
	var live []ledger.NodeRecord
	for _, id := range t.ids {
		m, inGossip := gossip[id]
		if p.live(now, id) || (inGossip && UpAtRegistered(t.nodes[id], m.State, m.Incarnation) && !mutation.On(mutation.FinalizeIgnoresGossip)) {
			live = append(live, t.nodes[id])
		}
	}
	if cur.Name == "" && len(live) == 0 {
		// No node has registered its versions yet: VersionTarget of
		// nobody is this binary's newest, which nodes of an older release
		// starting alongside could not run. Record once one has.
		return ledger.ClusterConfig{}, false
	}
	target, _ := ledger.VersionTarget(live)
	c := ledger.ClusterConfig{Name: p.cfg.ClusterName, Partitions: uint32(p.cfg.Ring.Partitions), Version: max(target, 1), Now: now.UnixNano()}
	switch {
	case cur.Name == "":
		return c, true
	case cur.Name != c.Name || cur.Partitions != c.Partitions:
		return ledger.ClusterConfig{}, false // the nodes refuse to start on it; nothing to propose
	case !p.cfg.ManualFinalize && target > cur.Version:
		return c, true
	}
	return ledger.ClusterConfig{}, false
}

// observe updates lastSeen and revokeSeen from the committed table. It
// diffs the table against what it saw last round, so observing later than
// the apply only makes the waits longer (safe).
func (p *Planner) observe(now time.Time, t table) {
	for _, id := range t.ids {
		n := t.nodes[id]
		tr := p.nodes[id]
		switch {
		case tr == nil:
			// Registered during this term: its first heartbeat just applied.
			p.nodes[id] = &nodeTrack{inc: n.Incarnation, liveness: n.Liveness, seq: n.Seq, lastSeen: now}
			continue
		case n.Incarnation != tr.inc || n.Seq != tr.seq:
			// A heartbeat applied (a renewal, a rejoin or a restart).
			if n.Incarnation > tr.inc {
				tr.restarted(now, p.cfg.StableFor)
			}
			tr.lastSeen, tr.expired, tr.expiring = now, false, false
		case n.Liveness != tr.liveness:
			// The liveness epoch moved without a heartbeat: ExpireNode.
			tr.expired, tr.expiring = true, false
		}
		tr.inc, tr.liveness, tr.seq = n.Incarnation, n.Liveness, n.Seq
	}
	for id := range p.nodes {
		if _, ok := t.nodes[id]; !ok {
			delete(p.nodes, id)
		}
	}
	for s, rec := range t.shards {
		p.epochs[s] = rec.Epoch
		if rec.State != ledger.ShardRevoking {
			delete(p.revokes, s)
			continue
		}
		if r, ok := p.revokes[s]; !ok || r.epoch != rec.Epoch {
			p.revokes[s] = revokeTrack{epoch: rec.Epoch, seen: now}
		}
	}
	for s := range p.revokes {
		if _, ok := t.shards[s]; !ok {
			delete(p.revokes, s)
		}
	}
	for s := range p.epochs {
		if _, ok := t.shards[s]; !ok {
			delete(p.epochs, s)
		}
	}
}

// live reports whether the leader believes n holds a lease: it heartbeated
// at its current liveness epoch less than Lease·(1+δ) ago.
func (p *Planner) live(now time.Time, id string) bool {
	tr := p.nodes[id]
	return tr != nil && !tr.expired && now.Sub(tr.lastSeen) < p.expireAfter()
}

func (p *Planner) expireAfter() time.Duration {
	if mutation.On(mutation.NoDriftMargin) {
		return p.cfg.Lease
	}
	return p.cfg.ExpireAfter()
}

// takeoverDue reports whether the takeover wait of the Revoking shard rec
// has passed at now: (Lease+Drain)·(1+δ) since the leader saw its Revoke.
func (p *Planner) takeoverDue(now time.Time, rec ledger.ShardRecord) bool {
	r, ok := p.revokes[rec.Shard]
	if !ok || r.epoch != rec.Epoch {
		return false // observe always records it; defensive
	}
	return now.Sub(r.seen) >= p.takeoverAfter() || mutation.On(mutation.SkipTakeoverWait)
}

// WordValid is the bound the leader relays with the old owner's word
// (cluster version 6, word.go): rec is the shard as the leader's replica
// shows it when it received from's Transfer to to. It is valid when rec
// is Revoking from from at its epoch toward to and this leader leads and
// tracks (or now starts tracking, below) that Revoke: the shard then
// leaves from other than by the Transfer only after the takeover wait
// (placement, takeoverDue), so the bound is what remains of it at now, on
// the leader's clock. Read it after receiving the target's ask.
//
// A Revoke this planner has not observed yet (it applied after the last
// round's observation: the old owner — this leader's own agent, or one
// that told its word over the port — was faster than the round) is
// observed here, seen at now, as the next round would: the takeover wait
// then counts from now, and the bound is all of it. Without this a word
// told within a round of the Revoke was dropped, and its target waited for
// the commit (traced at 60 ms under load).
//
// rec must be at least as new as anything the planner observed (node
// reads it under the loop's lock). A record older than the planner's view
// of the shard — the epoch of the last table observed, or of its revoke
// track — is refused: it is not an unobserved Revoke but a stale one
// whose takeover wait may have passed and whose shard may be owned
// elsewhere at a later epoch; a newer track is never replaced by it.
func (p *Planner) WordValid(now time.Time, rec ledger.ShardRecord, from, to string) (time.Duration, bool) {
	if !p.leading || rec.State != ledger.ShardRevoking || rec.Owner != from || rec.Target != to || from == to || to == "" {
		return 0, false
	}
	r, ok := p.revokes[rec.Shard]
	e, known := p.epochs[rec.Shard]
	if ((ok && r.epoch > rec.Epoch) || (known && e > rec.Epoch)) && !mutation.On(mutation.WordStaleRecord) {
		return 0, false
	}
	if !ok || r.epoch != rec.Epoch {
		r = revokeTrack{epoch: rec.Epoch, seen: now}
		p.revokes[rec.Shard] = r
	}
	d := r.seen.Add(p.takeoverAfter()).Sub(now)
	return d, d > 0
}

func (p *Planner) takeoverAfter() time.Duration {
	if mutation.On(mutation.NoDriftMargin) {
		return p.cfg.Lease + p.cfg.DrainTimeout
	}
	if mutation.On(mutation.TakeoverWithoutDrain) {
		return p.cfg.ExpireAfter()
	}
	return p.cfg.TakeoverAfter()
}

// expiries proposes ExpireNode for every node whose last heartbeat the
// leader saw at least Lease·(1+δ) ago by its own clock — at least Lease of
// real time, so the node's lease (≤ Lease real from its ask, which preceded
// the apply) has ended. The CAS on Seq makes it fail if a heartbeat lands
// first.
//
// An expired node (its liveness epoch moved without a heartbeat since) holds
// no lease at its current epoch. If it owns a valid shard anyway — a drained
// shard's Transfer, proposed by the old owner from a replica that already
// showed the new epoch, landed on it — it is expired again at once: it
// cannot act on that shard before a heartbeat at the epoch commits, which
// the CAS on Seq would see. The shard is then granted at once instead of
// being revoked from a node that will not drain it and taken over after
// (Lease+Drain)·(1+δ).
func (p *Planner) expiries(now time.Time, t table) []ledger.Command {
	var out []ledger.Command
	owns := make(map[string]bool)
	for _, rec := range t.shards {
		if t.valid(rec) {
			owns[rec.Owner] = true
		}
	}
	for _, id := range t.ids {
		tr := p.nodes[id]
		if tr.expired {
			if n := t.nodes[id]; owns[id] {
				out = append(out, p.expire(now, tr, n))
			}
			continue
		}
		if now.Sub(tr.lastSeen) < p.expireAfter() && !mutation.On(mutation.SkipExpiryWait) {
			continue
		}
		if mutation.On(mutation.SkipExpiryWait) && now.Sub(tr.lastSeen) < p.cfg.RenewEvery {
			continue
		}
		out = append(out, p.expire(now, tr, t.nodes[id]))
	}
	return out
}

// expire returns the ExpireNode for n and marks it expiring: from this
// decision until the planner sees the record move (or steps down), it
// accepts no renewal at n's liveness epoch, so no renewal acked after the
// decision can outlive the expiry.
func (p *Planner) expire(now time.Time, tr *nodeTrack, n ledger.NodeRecord) ledger.ExpireNode {
	if !mutation.On(mutation.RenewWhileExpiring) {
		tr.expiring, tr.expiringAt = true, n.Liveness
	}
	return ledger.ExpireNode{Node: n.ID, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq, Now: now.UnixNano()}
}

// Renew judges one lease renewal of node rec.ID at (inc, liveness), received
// at now (the leader's clock, read after receipt; cluster version 4). rec is
// the node's record in the leader's replica (the zero record if it has
// none). It returns ErrNotLeader before Establish or after StepDown;
// ledger.ErrStaleIncarnation or ledger.ErrStaleLiveness (wrapped) when rec
// is newer than the renewal — the node must register again with a log
// Heartbeat; ErrExpiring when this planner has proposed ExpireNode for that
// epoch and not yet seen it apply. Otherwise the node counts as seen at now
// (never earlier than before) and Renew returns nil; the shell acks the
// renewal only after a quorum confirms its leadership, with the commit
// index it read after receipt (docs/protocol.md).
func (p *Planner) Renew(now time.Time, rec ledger.NodeRecord, inc, liveness uint64) error {
	if !p.leading {
		return ErrNotLeader
	}
	switch {
	case rec.Incarnation > inc:
		return fmt.Errorf("%w: node %q renews incarnation %d; incarnation %d is registered",
			ledger.ErrStaleIncarnation, rec.ID, inc, rec.Incarnation)
	case rec.Incarnation == inc && rec.Liveness > liveness:
		return fmt.Errorf("%w: node %q renews liveness %d; the record is at %d",
			ledger.ErrStaleLiveness, rec.ID, liveness, rec.Liveness)
	}
	tr := p.nodes[rec.ID]
	if tr == nil || tr.inc != inc || tr.liveness != liveness {
		// The planner has not observed this registration yet: it will see
		// it apply and count the node as seen then (later than now). The
		// epoch it tracks, if older, is not the one renewed: its expiry
		// is a CAS the registration already defeated.
		return nil
	}
	if tr.expiring && tr.expiringAt == liveness {
		return fmt.Errorf("%w: node %q at liveness %d", ErrExpiring, rec.ID, liveness)
	}
	if now.After(tr.lastSeen) {
		tr.lastSeen = now
	}
	return nil
}

// updateRing decides who is in the placement ring.
//
// Hard signals remove a node at once: no node record, no lease (expired or
// not seen for Lease·(1+δ)), draining (ledger or gossip), a graceful
// leave, Member.NoShards (a voter that owns no shards), or an operator's
// exclusion (Input.Excluded). Soft signals — gossip suspect/dead/missing, health below MinHealth —
// remove it only after they have lasted StableFor, so a flapping node or a
// brief false suspicion moves nothing. A node enters the ring after it has
// been eligible for StableFor (entryWait: less for a node re-entering after
// a restart, reentryWait). A node that restarts (new incarnation) before
// its liveness expires keeps heartbeating, so it never loses its place: its
// old shards are invalid (new incarnation) and are granted straight back to
// it (stickiness).
func (p *Planner) updateRing(now time.Time, t table, members []Member) {
	byID := make(map[string]Member, len(members))
	for _, m := range members {
		byID[m.ID] = m
	}
	for id := range p.elig {
		if _, ok := t.nodes[id]; !ok {
			delete(p.elig, id)
		}
	}
	for _, id := range t.ids {
		if t.expiring[id] {
			// Out of this round's ring (buildRing), its streak kept: if
			// the expiry loses its compare-and-set to a heartbeat, the
			// node is back next round with nothing moved.
			continue
		}
		n := t.nodes[id]
		m, known := byID[id]
		e := p.elig[id]
		if e == nil {
			e = &eligTrack{}
			p.elig[id] = e
		}
		hard := !p.live(now, id) || n.Draining || t.excluded[id] || (known && (m.Draining || m.NoShards || m.State == member.Left))
		soft := !known || m.State == member.Suspect || m.State == member.Dead || m.Health < p.cfg.MinHealth
		switch {
		case hard:
			*e = eligTrack{}
		case soft:
			e.since = time.Time{}
			if e.badSince.IsZero() {
				e.badSince = now
			}
			if e.inRing && now.Sub(e.badSince) >= p.cfg.StableFor {
				e.inRing = false
			}
		default:
			e.badSince = time.Time{}
			if e.since.IsZero() {
				e.since = now
			}
			if !e.inRing && now.Sub(e.since) >= p.entryWait(id) {
				e.inRing = true
			}
		}
		if tr := p.nodes[id]; e.inRing && tr != nil {
			tr.reentry = false // in the ring since its restart (or never left)
		}
	}
}

// joining reports whether, early in this term (within 2·StableFor of
// Establish), some node is eligible but not yet in the ring. Only grants
// of never-owned shards wait for it, so a failover never does.
func (p *Planner) joining(now time.Time) bool {
	if now.Sub(p.establishedAt) >= 2*p.cfg.StableFor {
		return false
	}
	for _, e := range p.elig {
		if !e.inRing && !e.since.IsZero() {
			return true
		}
	}
	return false
}

func (p *Planner) inRing(id string) bool {
	e := p.elig[id]
	return e != nil && e.inRing
}

// buildRing decides this round's placement members and computes where every
// partition should be (ring.Assign over the committed owners).
func (p *Planner) buildRing(t table) error {
	members := make([]string, 0, len(p.elig))
	for id, e := range p.elig {
		if e.inRing && !t.expiring[id] {
			members = append(members, id)
		}
	}
	slices.Sort(members)
	if parts := p.cfg.Ring.Partitions; len(members) > parts {
		// More eligible nodes than shards: not every node can own one.
		// Keep the current owners first, then the others by id, so that the
		// surplus nodes are idle spares and nothing moves (ring.Assign
		// alone would pick the owners by its quota rank).
		owners := map[string]bool{}
		for _, rec := range t.shards {
			if t.valid(rec) {
				owners[rec.Owner] = true
			}
		}
		slices.SortStableFunc(members, func(a, b string) int {
			switch {
			case owners[a] == owners[b]:
				return 0
			case owners[a]:
				return -1
			}
			return 1
		})
		members = members[:parts]
		slices.Sort(members)
	}
	p.ringKey, p.assign = members, nil
	p.electionTargets(t)
	if len(members) == 0 {
		return nil
	}
	// The committed owner of every partition: Owned or Revoking records
	// (valid or not: a restarted owner still in the ring gets its shards
	// back), "" for Unowned ones. ring.Assign keeps what is within quota
	// and places the rest; it returns the same target for any state on the
	// way there, so the rounds that carry the moves out (and a new leader
	// recomputing halfway) never move a shard twice for one change.
	parts := p.cfg.Ring.Partitions
	prev := make([]string, parts)
	avoid := make([]string, parts)
	var pins []string
	for s := range uint32(parts) {
		rec := t.shard(s)
		switch {
		case rec.State == ledger.ShardRevoking && t.valid(rec) && slices.Contains(members, rec.Target):
			// A move in flight counts as done: its target is where the
			// shard will be (ring.Assign returns the same target for
			// any state on the way), and a load swap's two moves stay
			// one change when one lands before the other.
			prev[s] = rec.Target
		case rec.State == ledger.ShardOwned || rec.State == ledger.ShardRevoking:
			prev[s] = rec.Owner
		}
		avoid[s] = rec.AvoidOwner
		if pin, ok := t.pins[s]; ok {
			if pins == nil {
				pins = make([]string, parts)
			}
			pins[s] = pin
		}
	}
	pl := ring.Placement{Partitions: parts, Members: members, Prev: prev, Avoid: avoid, Pins: pins}
	for _, m := range members {
		if w := t.groups.weight[m]; w > 1 {
			if pl.Weights == nil {
				pl.Weights = make(map[string]int)
			}
			pl.Weights[m] = min(w, ring.MaxWeight)
		}
		if z := t.groups.zone[m]; z != "" {
			if pl.Zones == nil {
				pl.Zones = make(map[string]string)
			}
			pl.Zones[m] = z
		}
	}
	a, err := ring.Assign(pl)
	if err != nil {
		p.ringKey = nil
		return fmt.Errorf("ownership: placement over %d members: %w", len(members), err)
	}
	p.assign = a
	return nil
}

// target is the owner ring.Assign chose for partition s ("" when no node
// is eligible).
func (p *Planner) target(s uint32) string {
	if int64(s) >= int64(len(p.assign)) {
		return ""
	}
	return p.assign[s]
}

// placement proposes grants, takeovers and revokes, one pass over the
// shards in order.
func (p *Planner) placement(now time.Time, t table) []ledger.Command {
	var grants []ledger.Command
	type revoke struct {
		prio int // 0: owner left the ring (drain, unhealthy, gone); 1: rebalance
		cmd  ledger.Revoke
	}
	var revokes []revoke
	inFlight := 0
	ts := now.UnixNano()
	for _, s := range t.groups.placed {
		rec := t.shard(s)
		valid := t.valid(rec)
		if valid && rec.State == ledger.ShardRevoking {
			inFlight++
		}
		target, g, fenced := p.fenced(now, t, rec, valid, p.placementTarget(t, rec, valid))
		if fenced {
			grants = append(grants, g)
			continue
		}
		if target == "" {
			continue // no eligible node: leave the shard as it is
		}
		to := t.nodes[target]
		if rec.Epoch == 0 && p.joining(now) {
			// Never owned (a cold start, a new election): hold it while
			// nodes that are eligible are still waiting out StableFor, so
			// it is placed once on the ring they make rather than granted
			// to the first node and moved again moments later.
			continue
		}
		switch {
		case !valid && rec.State != ledger.ShardUnowned && mutation.On(mutation.LeaveExpiredShards):
		case !valid && t.words && rec.State == ledger.ShardRevoking && rec.Target != "" && !p.takeoverDue(now, rec) &&
			!mutation.On(mutation.RetargetAfterWord):
			// Rule 3 of the handoff on a word: the target may act on its
			// old owner's word until the bound cut from this wait
			// (WordValid), whatever became of the owner since.
		case !valid:
			// Unowned, or the owner's incarnation/liveness moved on (it
			// restarted or was expired): grant at once. The ledger re-checks
			// validity, so a racing heartbeat cannot make this a second owner.
			grants = append(grants, ledger.Grant{Shard: s, ExpectedEpoch: rec.Epoch, Owner: target,
				OwnerIncarnation: to.Incarnation, OwnerLiveness: to.Liveness, Now: ts, Reason: grantReason(rec, t)})
		case rec.State == ledger.ShardRevoking:
			// Takeover: the owner never released. Its lease (from asks before
			// the Revoke) ended by Lease after the Revoke committed and its
			// drain by DrainTimeout after that; we saw the Revoke no earlier
			// than it committed and wait (Lease+DrainTimeout)·(1+δ).
			if !p.takeoverDue(now, rec) {
				continue
			}
			grants = append(grants, ledger.Grant{Shard: s, ExpectedEpoch: rec.Epoch, Owner: target,
				OwnerIncarnation: to.Incarnation, OwnerLiveness: to.Liveness, Takeover: true, Now: ts,
				Reason: "takeover from " + rec.Owner})
		case rec.Owner != target:
			prio, reason := 1, "rebalance to "+target
			switch {
			case !p.inRing(rec.Owner):
				prio, reason = 0, p.leaveReason(rec.Owner, t)
			case t.pins[s] == target:
				prio, reason = 0, "pinned to "+target
			}
			if prio == 1 && mutation.On(mutation.NoRebalance) {
				continue
			}
			revokes = append(revokes, revoke{prio, ledger.Revoke{Shard: s, Epoch: rec.Epoch, Target: target, Now: ts, Reason: reason}})
		}
	}
	// Churn budget: at most MaxMovesInFlight shards Revoking at once; owners
	// that left the ring go first, then rebalancing, each in shard order.
	slices.SortStableFunc(revokes, func(a, b revoke) int { return cmp.Compare(a.prio, b.prio) })
	budget := max(p.cfg.MaxMovesInFlight-inFlight, 0)
	out := grants
	var rv []ledger.Command
	for _, r := range revokes[:min(budget, len(revokes))] {
		rv = append(rv, r.cmd)
	}
	slices.SortFunc(rv, func(a, b ledger.Command) int { return cmp.Compare(a.(ledger.Revoke).Shard, b.(ledger.Revoke).Shard) })
	out = append(out, rv...)
	slices.SortStableFunc(out, func(a, b ledger.Command) int { return cmp.Compare(shardOf(a), shardOf(b)) })
	if len(out) == 0 {
		return p.loadSwap(now, t, inFlight, p.settled(t))
	}
	p.unsettledAt = now
	return out
}

func shardOf(c ledger.Command) uint32 {
	switch c := c.(type) {
	case ledger.Grant:
		return c.Shard
	case ledger.Revoke:
		return c.Shard
	}
	return 0
}

func grantReason(rec ledger.ShardRecord, t table) string {
	switch {
	case rec.State == ledger.ShardUnowned:
		return "unowned"
	case rec.Owner == "":
		return "unowned"
	}
	n, ok := t.nodes[rec.Owner]
	switch {
	case !ok:
		return "owner " + rec.Owner + " unknown"
	case n.Incarnation != rec.OwnerIncarnation:
		return "owner " + rec.Owner + " restarted"
	default:
		return "owner " + rec.Owner + " expired"
	}
}

func (p *Planner) leaveReason(id string, t table) string {
	if t.excluded[id] {
		return id + " excluded"
	}
	if n, ok := t.nodes[id]; ok && n.Draining {
		return "drain " + id
	}
	if tr := p.nodes[id]; tr != nil && tr.expired {
		return id + " expired"
	}
	return id + " left the ring"
}
