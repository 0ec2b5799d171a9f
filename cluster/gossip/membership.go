package gossip

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/cluster/internal/logadapt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Membership errors. Wrapped errors carry the details; match with errors.Is.
var (
	// ErrMembershipConfig: a Config value is invalid (the message names it).
	ErrMembershipConfig = errors.New("cluster: invalid membership config")
	// ErrMembershipClosed: the Membership has left or shut down.
	ErrMembershipClosed = errors.New("cluster: membership closed")
	// ErrInvalidMeta: node metadata is malformed or fails validation.
	ErrInvalidMeta = errors.New("cluster: invalid node metadata")
	// ErrMetaTooLarge: encoded metadata exceeds MetaMaxSize.
	ErrMetaTooLarge = errors.New("cluster: node metadata too large")
	// ErrForeignCluster: a peer belongs to another cluster (Meta.Group).
	ErrForeignCluster = errors.New("cluster: peer belongs to another cluster")
	// ErrEncryptionDisabled: a keyring operation on a Membership started
	// without SecretKeys.
	ErrEncryptionDisabled = errors.New("cluster: gossip encryption is not enabled")
)

// Membership is this node's gossip membership: who is alive, their
// metadata, and a stream of coalesced membership events. Gossip is a hint:
// nothing here decides ownership.
//
// All methods are safe for concurrent use.
type Membership struct {
	cfg       Config
	log       *slog.Logger
	name      string // memberlist node name: id#suffix
	view      *view
	ml        *memberlist.Memberlist
	keyring   *memberlist.Keyring
	keyringMu sync.Mutex // serializes keyring ops with their persistence

	updateMu  sync.Mutex // serializes UpdateMeta and Leave
	metaMu    sync.RWMutex
	meta      Meta
	metaBytes []byte

	subsMu sync.Mutex
	subs   map[*Subscription]struct{}

	seedsMu sync.Mutex
	seeds   []string

	rejected atomic.Uint64
	// refused is the last merge NotifyMerge refused (ErrForeignCluster),
	// reported by Join when no seed could be joined.
	refused atomic.Pointer[error]

	lifeMu   sync.Mutex
	closed   bool
	stop     chan struct{}
	wg       sync.WaitGroup
	shutdown sync.Once
}

// NewMembership validates cfg, creates and starts memberlist with meta as
// this node's metadata, and starts the event and rejoin loops. It does not
// join anyone: call Join. meta.ID must equal cfg.Name or be empty (it is
// filled in); meta.Group, when empty, is set to cfg.ClusterLabel.
func NewMembership(cfg Config, meta Meta) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if meta.ID == "" {
		meta.ID = cfg.Name
	}
	if meta.ID != cfg.Name {
		return nil, fmt.Errorf("%w: Meta.ID %q differs from Config.Name %q", ErrMembershipConfig, meta.ID, cfg.Name)
	}
	if meta.Group == "" {
		meta.Group = cfg.ClusterLabel
	}
	meta.Leaving = false
	encoded, err := EncodeMeta(meta)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var suffix [6]byte
	for i := range suffix {
		suffix[i] = byte(rand.Uint32())
	}
	m := &Membership{
		cfg:       cfg,
		log:       logger.With("node", cfg.Name),
		name:      cfg.Name + "#" + hex.EncodeToString(suffix[:]),
		meta:      copyMember(Member{Meta: meta}).Meta,
		metaBytes: encoded,
		subs:      make(map[*Subscription]struct{}),
		seeds:     append([]string(nil), cfg.Seeds...),
		stop:      make(chan struct{}),
	}
	m.view = newView(m.log, m.name, meta.ID)

	mlc := cfg.memberlistConfig(m.name)
	d := &delegates{m: m}
	mlc.Delegate = d
	mlc.Events = d
	mlc.Alive = d
	mlc.Merge = d
	mlc.Conflict = d
	mlc.Logger = log.New(logadapt.NewMemberlistWriter(m.log), "", 0)
	mlc.LogOutput = nil
	if cfg.KeyringFile != "" {
		keys, err := LoadKeyring(cfg.KeyringFile)
		if err != nil {
			return nil, err
		}
		if len(keys) > 0 {
			if len(cfg.SecretKeys) > 0 && !bytes.Equal(cfg.SecretKeys[0], keys[0]) {
				m.log.Warn("membership: the keyring file takes precedence over the configured gossip key", "file", cfg.KeyringFile)
			}
			cfg.SecretKeys = keys
		}
	}
	if len(cfg.SecretKeys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.SecretKeys, cfg.SecretKeys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: SecretKeys: %v", ErrMembershipConfig, err)
		}
		m.keyring = kr
		mlc.Keyring = kr
		mlc.GossipVerifyIncoming = true
		mlc.GossipVerifyOutgoing = true
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("cluster: start memberlist: %w", err)
	}
	m.ml = ml

	m.wg.Add(1)
	go m.eventLoop()
	if cfg.RejoinInterval > 0 {
		m.wg.Add(1)
		go m.rejoinLoop()
	}
	m.log.Debug("membership started", "instance", m.name, "addr", m.Local().Addr, "profile", cfg.Profile)
	return m, nil
}

// Join contacts the given gossip addresses (host:port; nil means
// Config.Seeds) and merges state with them. It returns how many were
// reached; the error is non-nil only when none was. The addresses are
// remembered and re-joined every RejoinInterval.
func (m *Membership) Join(ctx context.Context, seeds []string) (int, error) {
	if len(seeds) == 0 {
		seeds = m.cfg.Seeds
	}
	if len(seeds) == 0 {
		return 0, nil
	}
	m.rememberSeeds(seeds)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	m.lifeMu.Lock() // Add before Shutdown's Wait, never concurrently
	if m.closed {
		m.lifeMu.Unlock()
		return 0, ErrMembershipClosed
	}
	m.wg.Add(1)
	m.lifeMu.Unlock()
	m.refused.Store(nil)
	go func() {
		defer m.wg.Done()
		n, err := m.ml.Join(seeds)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			// memberlist flattens the delegate's error into text; return the
			// refusal itself so callers can match ErrForeignCluster.
			if p := m.refused.Load(); p != nil && r.n == 0 {
				return 0, fmt.Errorf("cluster: join %v: %w (%v)", seeds, *p, r.err)
			}
			return r.n, fmt.Errorf("cluster: join %v: %w", seeds, r.err)
		}
		return r.n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("cluster: join %v: %w", seeds, ctx.Err())
	}
}

func (m *Membership) rememberSeeds(seeds []string) {
	m.seedsMu.Lock()
	defer m.seedsMu.Unlock()
	for _, s := range seeds {
		known := false
		for _, k := range m.seeds {
			known = known || k == s
		}
		if !known {
			m.seeds = append(m.seeds, s)
		}
	}
}

// Members returns every member this node knows, sorted by ID, including
// itself and members that are dead or left (until ReapTimeout). Several
// processes that used one id (restarts) are folded into the one with the
// highest Meta.Incarnation, then the alive one, then the newest.
func (m *Membership) Members() []Member { return m.view.list() }

// Local returns this node as gossip sees it.
func (m *Membership) Local() Member {
	if mem, ok := m.view.get(m.cfg.Name); ok {
		return mem
	}
	m.metaMu.RLock()
	defer m.metaMu.RUnlock()
	return copyMember(Member{Meta: m.meta})
}

// Rejected returns how many alive messages, merges and metadata from peers
// were refused (malformed metadata or another cluster).
func (m *Membership) Rejected() uint64 { return m.rejected.Load() }

// UpdateMeta applies fn to a copy of this node's metadata and gossips the
// result. It returns an error matching ErrInvalidMeta or ErrMetaTooLarge,
// and changes nothing, when the result is invalid or over MetaMaxSize; the
// ID cannot be changed. It waits at most Config.UpdateTimeout for the
// broadcast to go out; the update is applied and queued either way.
func (m *Membership) UpdateMeta(fn func(*Meta)) error {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	if m.isClosed() {
		return ErrMembershipClosed
	}
	return m.updateMetaLocked(fn)
}

// QueueMeta is UpdateMeta without waiting for the update's broadcast: the
// new metadata is this node's at once (Members, Local, push/pull) and
// gossip sends it at its next interval. For a caller whose next steps do
// not need peers to have seen it (a disk-less member's registration).
func (m *Membership) QueueMeta(fn func(*Meta)) error {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	if m.isClosed() {
		return ErrMembershipClosed
	}
	return m.updateMetaWait(fn, noWait)
}

func (m *Membership) updateMetaLocked(fn func(*Meta)) error {
	return m.updateMetaWait(fn, m.cfg.UpdateTimeout)
}

func (m *Membership) updateMetaWait(fn func(*Meta), wait time.Duration) error {
	m.metaMu.RLock()
	next := copyMember(Member{Meta: m.meta}).Meta
	m.metaMu.RUnlock()
	fn(&next)
	if next.ID != m.cfg.Name {
		return fmt.Errorf("%w: the node id cannot change (%q → %q)", ErrInvalidMeta, m.cfg.Name, next.ID)
	}
	encoded, err := EncodeMeta(next)
	if err != nil {
		return err
	}
	m.metaMu.Lock()
	m.meta, m.metaBytes = next, encoded
	m.metaMu.Unlock()
	if err := m.ml.UpdateNode(wait); err != nil {
		m.log.Debug("membership: metadata update still queued", "err", err)
	}
	return nil
}

// Subscribe returns a subscription to coalesced membership events, holding
// up to buffer undelivered batches (at least 1); see Subscription for what
// happens when it is full. Call Members after Subscribe for the current
// state. Close it when done.
func (m *Membership) Subscribe(buffer int) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	s := &Subscription{m: m, ch: make(chan []Event, buffer)}
	m.subsMu.Lock()
	defer m.subsMu.Unlock()
	if m.subs == nil { // shut down
		s.closed = true
		close(s.ch)
		return s
	}
	m.subs[s] = struct{}{}
	return s
}

// Leave announces a graceful leave — first as metadata (Meta.Leaving, so
// peers record a leave rather than a failure), then memberlist's leave
// message — and shuts down. The wait for the broadcasts is bounded by
// 8·UpdateTimeout and by ctx; the node shuts down even when it expires,
// and the error says so.
func (m *Membership) Leave(ctx context.Context) error {
	m.updateMu.Lock()
	if m.isClosed() {
		m.updateMu.Unlock()
		return ErrMembershipClosed
	}
	// ctx may shorten the wait, not lengthen it: a caller's generous
	// deadline must not hold the last node of a stopping cluster, whose
	// broadcasts nobody confirms, for all of it.
	timeout := m.cfg.UpdateTimeout * 8
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	timeout = max(timeout, 2*time.Millisecond)
	// Half the time for the Leaving flag to spread before memberlist's
	// leave message (which supersedes it in the broadcast queue). Both are
	// best effort: when nobody is left to hear them (a whole cluster
	// stopping) they time out, and peers that missed them declare the node
	// failed instead — so a timeout is logged, not returned.
	if err := m.updateMetaWait(func(meta *Meta) { meta.Leaving = true }, timeout/2); err != nil {
		m.log.Warn("membership: leaving flag not confirmed by a peer", "err", err)
	}
	if err := m.ml.Leave(timeout / 2); err != nil {
		m.log.Warn("membership: leave message not confirmed by a peer", "err", err)
	}
	m.updateMu.Unlock()
	return m.Shutdown()
}

// Shutdown stops gossip without leaving: peers will declare this node
// failed. It closes every subscription. It is idempotent.
func (m *Membership) Shutdown() error {
	var err error
	m.shutdown.Do(func() {
		m.updateMu.Lock() // not while UpdateMeta or Leave talk to memberlist
		m.lifeMu.Lock()
		m.closed = true
		m.lifeMu.Unlock()
		m.updateMu.Unlock()
		err = m.ml.Shutdown()
		close(m.stop)
		m.wg.Wait()
		m.subsMu.Lock()
		subs := m.subs
		m.subs = nil
		m.subsMu.Unlock()
		for s := range subs {
			s.close()
		}
	})
	return err
}

func (m *Membership) isClosed() bool {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	return m.closed
}

// eventLoop turns the view's queued events into coalesced batches and
// reaps forgotten members.
func (m *Membership) eventLoop() {
	defer m.wg.Done()
	var c coalescer
	var coalesceT, quiescentT *time.Timer
	var coalesceC, quiescentC <-chan time.Time
	reapEvery := min(max(m.cfg.ReapTimeout/4, 10*time.Millisecond), time.Minute)
	reap := time.NewTicker(reapEvery)
	defer reap.Stop()
	stopTimers := func() {
		if coalesceT != nil {
			coalesceT.Stop()
			quiescentT.Stop()
		}
		coalesceT, quiescentT, coalesceC, quiescentC = nil, nil, nil, nil
	}
	defer stopTimers()
	flush := func() {
		stopTimers()
		if !c.empty() {
			m.publish(c.flush())
		}
	}
	collect := func() {
		evs := m.view.take()
		if len(evs) == 0 {
			return
		}
		for _, e := range evs {
			c.add(e)
		}
		if m.cfg.CoalescePeriod == 0 {
			flush()
			return
		}
		if coalesceT == nil {
			coalesceT = time.NewTimer(m.cfg.CoalescePeriod)
			quiescentT = time.NewTimer(m.cfg.QuiescentPeriod)
			coalesceC, quiescentC = coalesceT.C, quiescentT.C
		} else {
			quiescentT.Reset(m.cfg.QuiescentPeriod)
		}
	}
	for {
		select {
		case <-m.stop:
			return
		case <-m.view.notify:
			collect()
		case <-reap.C:
			m.view.reap(time.Now(), m.cfg.ReapTimeout)
			collect()
		case <-coalesceC:
			flush()
		case <-quiescentC:
			flush()
		}
	}
}

func (m *Membership) publish(batch []Event) {
	m.subsMu.Lock()
	subs := make([]*Subscription, 0, len(m.subs))
	for s := range m.subs {
		subs = append(subs, s)
	}
	m.subsMu.Unlock()
	for _, s := range subs {
		s.deliver(batch)
	}
}

// rejoinLoop periodically re-joins seeds that are not alive members, plus
// one failed member, so that a healed partition merges again even after
// both sides reaped each other (memberlist stops gossiping to the dead after
// GossipToTheDeadTime). While this node knows no other alive member (its
// seeds were not up yet when it started: a whole fleet started at once) it
// retries sooner, backing off from firstRejoinDelay (rejoinDelay).
func (m *Membership) rejoinLoop() {
	defer m.wg.Done()
	attempt := 0
	t := time.NewTimer(rejoinDelay(m.alone(), attempt, m.cfg.RejoinInterval))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		targets := m.rejoinTargets()
		if len(targets) > 0 {
			n, err := m.ml.Join(targets)
			m.log.Debug("membership: rejoin", "targets", targets, "reached", n, "err", err)
		}
		alone := m.alone()
		if alone {
			attempt++
		} else {
			attempt = 0
		}
		t.Reset(rejoinDelay(alone, attempt, m.cfg.RejoinInterval))
	}
}

// firstRejoinDelay is the first retry of a node that knows no other alive
// member; each further one waits twice as long, up to RejoinInterval.
const firstRejoinDelay = 250 * time.Millisecond

// rejoinDelay is how long the rejoin loop waits before its next round:
// RejoinInterval, or — while this node knows no other alive member —
// firstRejoinDelay doubled per failed attempt (attempt 0 is the first
// round after start), capped at RejoinInterval. Before, a member whose
// seeds were not listening yet when it started (every agent of a fleet
// started at once) waited a whole RejoinInterval (30 s in the LAN
// profile) before it tried again: at N = 30 on loopback two members
// registered 30 s after the others (docs/benchmarks.md).
func rejoinDelay(alone bool, attempt int, interval time.Duration) time.Duration {
	if !alone {
		return interval
	}
	d := firstRejoinDelay
	for i := 0; i < attempt && d < interval; i++ {
		d *= 2
	}
	return min(d, interval)
}

// alone reports whether this node knows no alive member but itself.
func (m *Membership) alone() bool {
	self := m.Local().Addr
	for a := range m.view.aliveAddrs() {
		if a != self {
			return false
		}
	}
	return true
}

func (m *Membership) rejoinTargets() []string {
	self := m.Local().Addr
	alive := m.view.aliveAddrs()
	m.seedsMu.Lock()
	seeds := append([]string(nil), m.seeds...)
	m.seedsMu.Unlock()
	var targets []string
	for _, s := range seeds {
		if s != self && !alive[s] {
			targets = append(targets, s)
		}
	}
	if failed := m.view.failedAddrs(); len(failed) > 0 {
		pick := failed[rand.IntN(len(failed))]
		if pick != self && !containsString(targets, pick) {
			targets = append(targets, pick)
		}
	}
	return targets
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// delegates implements memberlist's callbacks. memberlist calls most of
// them with its node lock held: they must not block and must not call back
// into memberlist. They only touch Membership's own locks.
type delegates struct{ m *Membership }

// NodeMeta returns the encoded local metadata (always ≤ MetaMaxSize).
func (d *delegates) NodeMeta(limit int) []byte {
	d.m.metaMu.RLock()
	defer d.m.metaMu.RUnlock()
	if len(d.m.metaBytes) > limit { // cannot happen: EncodeMeta enforces MetaMaxSize
		return nil
	}
	return append([]byte(nil), d.m.metaBytes...)
}

// NotifyMsg ignores user messages: this package sends none.
func (d *delegates) NotifyMsg([]byte) {}

// GetBroadcasts has no user broadcasts.
func (d *delegates) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState sends, with every push/pull, the instance names this node
// knows left gracefully, so a peer that saw the leave as a failure (it got
// memberlist's leave message before the Leaving flag) corrects itself.
func (d *delegates) LocalState(bool) []byte {
	return encodeLeftNames(d.m.view.leftNames(maxLeftNames))
}

// MergeRemoteState applies a peer's left-instance names; malformed input
// is logged and ignored.
func (d *delegates) MergeRemoteState(buf []byte, _ bool) {
	if len(buf) == 0 {
		return
	}
	names, err := decodeLeftNames(buf)
	if err != nil {
		d.m.rejected.Add(1)
		d.m.log.Warn("membership: ignoring malformed push/pull state", "err", err)
		return
	}
	d.m.view.markLeft(names, time.Now())
}

// NotifyJoin records a node that became alive.
func (d *delegates) NotifyJoin(n *memberlist.Node) { d.observe(n, false) }

// NotifyUpdate records changed metadata or address.
func (d *delegates) NotifyUpdate(n *memberlist.Node) { d.observe(n, false) }

// NotifyLeave records a node that died or left.
func (d *delegates) NotifyLeave(n *memberlist.Node) { d.observe(n, true) }

func (d *delegates) observe(n *memberlist.Node, gone bool) {
	d.m.view.observe(n.Name, n.Addr, n.Port, n.Meta, gone, time.Now())
}

// NotifyAlive admits a peer only if its metadata decodes, belongs to this
// node's group and matches its instance name.
func (d *delegates) NotifyAlive(peer *memberlist.Node) error {
	if err := d.m.checkPeer(peer.Name, peer.Meta); err != nil {
		d.m.rejected.Add(1)
		return err
	}
	return nil
}

// NotifyMerge refuses a push/pull merge with nodes of another group.
// Malformed nodes are left to NotifyAlive, which drops them one by one.
func (d *delegates) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if err := d.m.checkPeer(p.Name, p.Meta); errors.Is(err, ErrForeignCluster) {
			d.m.rejected.Add(1)
			d.m.refused.Store(&err)
			d.m.log.Warn("membership: refusing to merge with another cluster", "peer", p.Name, "addr", p.Address(), "err", err)
			return err
		}
	}
	return nil
}

// NotifyConflict logs two processes claiming one instance name (which the
// random suffix makes practically impossible).
func (d *delegates) NotifyConflict(existing, other *memberlist.Node) {
	d.m.log.Warn("membership: instance name conflict", "instance", existing.Name, "known_addr", existing.Address(), "other_addr", other.Address())
}

func (m *Membership) checkPeer(name string, raw []byte) error {
	meta, err := DecodeMeta(raw)
	if err != nil {
		return fmt.Errorf("node %q: %w", name, err)
	}
	m.metaMu.RLock()
	group := m.meta.Group
	m.metaMu.RUnlock()
	if meta.Group != group {
		return fmt.Errorf("%w: node %q is in group %q, this node in %q", ErrForeignCluster, name, meta.Group, group)
	}
	if id, _, ok := strings.Cut(name, "#"); !ok || id != meta.ID {
		return fmt.Errorf("%w: instance name %q does not match node id %q", ErrInvalidMeta, name, meta.ID)
	}
	if m.cfg.CheckPeer != nil {
		if err := m.cfg.CheckPeer(meta); err != nil {
			return fmt.Errorf("%w: node %q: %w", ErrForeignCluster, name, err)
		}
	}
	return nil
}

// hostPort formats ip:port.
func hostPort(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// TagClaiming marks, in Meta.Tags, an instance that has not yet checked
// that no other live process uses its node id (ClaimID). Views never
// let such an instance displace an alive or suspect instance of the same
// id, so a second process started with a live node's id is never seen in
// that node's place, and its refusal leaves the first untouched.
const TagClaiming = "tenure.claiming"

// ErrIDInUse: another live process gossips this node's id (ClaimID); the
// message names its address.
var ErrIDInUse = errors.New("cluster: node id in use by another live process")

// claimProbes is how many direct pings an earlier instance of this node's
// id gets before it is taken for dead (one lost datagram must not hide a
// live process).
const claimProbes = 3

// ClaimID checks that no other live process gossips this node's id, then
// clears TagClaiming from this node's metadata. Call it after Join, before
// acting under the id. Another instance of the id that gossip holds alive
// or suspect is:
//   - at this node's own gossip address: an earlier life of this process
//     (a crash and restart on the same address; this process holds the
//     port now), not a clash;
//   - elsewhere and answering direct pings addressed to its instance name:
//     a clash, reported as ErrIDInUse naming its address;
//   - elsewhere and silent for claimProbes pings: a dead earlier life (a
//     restart on a new address, or on a new disk), not a clash.
//
// Gossip only knows instances that the seeds joined so far know: a
// process started while its seeds were unreachable is not checked.
func (m *Membership) ClaimID(ctx context.Context) error {
	selfAddr := m.Local().Addr             // the view's copy of this instance's address
	for _, n := range m.view.liveTwins() { // alive and suspect
		addr := hostPort(n.ip, n.port)
		if addr == selfAddr {
			m.log.Info("membership: an earlier instance of this node at this address is still in gossip: a restart",
				"instance", n.name, "incarnation", n.meta.Incarnation)
			continue
		}
		if rtt, ok := m.answers(ctx, n); ok {
			return fmt.Errorf("%w: %q is running at %s (instance %s, incarnation %d, raft %s, answered a ping in %v)",
				ErrIDInUse, n.meta.ID, addr, n.name, n.meta.Incarnation, n.meta.RaftAddr, rtt.Round(time.Microsecond))
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cluster: claim node id: %w", context.Cause(ctx))
		}
		m.log.Info("membership: an earlier instance of this node does not answer: taken for dead",
			"instance", n.name, "addr", addr, "incarnation", n.meta.Incarnation)
	}
	m.metaMu.RLock()
	_, claiming := m.meta.Tags[TagClaiming]
	m.metaMu.RUnlock()
	if !claiming {
		return nil
	}
	// Queue the update without waiting for its broadcast (up to one
	// GossipInterval, 200 ms in the LAN profile): nothing the caller does
	// next needs peers to have seen it, and a restarted node's registration
	// waited for it (issue 15, goal 4).
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	if m.isClosed() {
		return ErrMembershipClosed
	}
	return m.updateMetaWait(func(meta *Meta) { delete(meta.Tags, TagClaiming) }, noWait)
}

// noWait, as updateMetaWait's wait, queues the broadcast and returns at
// once (memberlist's UpdateNode waits for ever on 0).
const noWait = time.Nanosecond

// answers pings instance n directly up to claimProbes times.
func (m *Membership) answers(ctx context.Context, n twin) (time.Duration, bool) {
	addr := &net.UDPAddr{IP: n.ip, Port: int(n.port)}
	for range claimProbes {
		if ctx.Err() != nil {
			return 0, false
		}
		if rtt, err := m.ml.Ping(n.name, addr); err == nil {
			return rtt, true
		}
	}
	return 0, false
}
