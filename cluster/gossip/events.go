package gossip

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventFailed:
		return "failed"
	case EventLeave:
		return "leave"
	case EventReap:
		return "reap"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// String formats the event for logs and test failures.
func (e Event) String() string {
	return fmt.Sprintf("%s %s@%s(%s inc=%d)", e.Kind, e.Member.ID, e.Member.Addr, e.Member.State, e.Member.Incarnation)
}

// Subscription receives coalesced batches of membership events.
//
// Buffering: C() has room for the number of batches given to Subscribe. When
// it is full the OLDEST undelivered batch is discarded to make room for the
// newest, and Dropped counts the events it held. A reader that sees Dropped
// grow should re-read Membership.Members, which is always current. Delivery
// never blocks gossip.
//
// Each batch holds at most one event per member id, sorted by id; the Member
// in an event is that member's state at the end of the batch (events are
// upserts). A join followed by updates in one batch stays a join.
type Subscription struct {
	m       *Membership
	ch      chan []Event
	mu      sync.Mutex
	closed  bool
	dropped atomic.Uint64
}

// C returns the channel of event batches. It is closed by Close and when the
// Membership shuts down.
func (s *Subscription) C() <-chan []Event { return s.ch }

// Dropped returns how many events were discarded because the reader fell
// behind.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close stops delivery and closes C. It is safe to call more than once.
func (s *Subscription) Close() {
	s.m.subsMu.Lock()
	delete(s.m.subs, s)
	s.m.subsMu.Unlock()
	s.close()
}

func (s *Subscription) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// deliver sends batch without blocking, discarding the oldest queued batch
// when the channel is full. Only the event loop sends, so one discard always
// makes room.
func (s *Subscription) deliver(batch []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for range 2 {
		select {
		case s.ch <- batch:
			return
		default:
		}
		select {
		case old := <-s.ch:
			s.dropped.Add(uint64(len(old)))
		default:
		}
	}
	s.dropped.Add(uint64(len(batch)))
}

// twin is another instance of this node's own id, as gossip reported it.
type twin struct {
	name  string
	ip    net.IP
	port  uint16
	meta  Meta
	state MemberState
}

// maxTwins bounds the other instances of this node's id the view keeps.
const maxTwins = 64

// liveTwins returns copies of the other instances of this node's id that
// gossip holds alive or suspect.
func (v *view) liveTwins() []twin {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []twin
	for _, t := range v.twins {
		if stateRank(t.state) == 2 {
			out = append(out, *t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// instance is one memberlist node (one process) of a member.
type instance struct {
	name  string // memberlist node name
	meta  Meta
	addr  string
	state MemberState
	since time.Time // last state change
	seq   uint64    // order in which this view first saw the instance
}

// rank orders instances of one id: an instance still claiming its id
// (TagClaiming) never over an alive or suspect one that is not; then the
// highest process incarnation, then alive over left over dead, then the
// most recently seen.
func (i *instance) better(j *instance) bool {
	if ic, jc := i.claiming(), j.claiming(); ic != jc {
		if ic && stateRank(j.state) == 2 {
			return false
		}
		if jc && stateRank(i.state) == 2 {
			return true
		}
	}
	if i.meta.Incarnation != j.meta.Incarnation {
		return i.meta.Incarnation > j.meta.Incarnation
	}
	ri, rj := stateRank(i.state), stateRank(j.state)
	if ri != rj {
		return ri > rj
	}
	return i.seq > j.seq
}

func (i *instance) claiming() bool {
	_, ok := i.meta.Tags[TagClaiming]
	return ok
}

func stateRank(s MemberState) int {
	switch s {
	case StateAlive, StateSuspect:
		return 2
	case StateLeft:
		return 1
	}
	return 0
}

type memberEntry struct {
	instances map[string]*instance
	current   Member
	since     time.Time // when current.State last changed
}

// view folds memberlist's per-instance callbacks into one Member per node
// id and derives events from the changes. Its lock is never held while
// calling memberlist, so the delegates that feed it cannot deadlock.
type view struct {
	log       *slog.Logger
	localName string
	localID   string

	mu      sync.Mutex
	members map[string]*memberEntry
	// twins: other instances that gossip this node's own id (an earlier
	// life of this process, or a clash), copied from memberlist's callbacks
	// so ClaimID never reads memberlist's live node records (which its
	// packet handler writes without a lock callers can take).
	twins  map[string]*twin
	seq    uint64
	queue  []Event
	notify chan struct{} // capacity 1: "queue is non-empty"
}

func newView(log *slog.Logger, localName, localID string) *view {
	return &view{
		log:       log,
		localName: localName,
		localID:   localID,
		members:   make(map[string]*memberEntry),
		twins:     make(map[string]*twin),
		notify:    make(chan struct{}, 1),
	}
}

// observe records what memberlist reported about instance name. gone means
// NotifyLeave (dead or left; the Leaving flag in the last meta tells which).
func (v *view) observe(name string, ip net.IP, port uint16, rawMeta []byte, gone bool, now time.Time) {
	meta, err := DecodeMeta(rawMeta)
	if err != nil {
		v.log.Warn("membership: ignoring member with malformed metadata", "node", name, "err", err)
		return
	}
	state := StateAlive
	if gone {
		state = StateDead
		if meta.Leaving {
			state = StateLeft
		}
	}
	if meta.ID == v.localID && name != v.localName {
		if state == StateAlive {
			v.log.Warn("membership: another instance uses this node's id", "instance", name, "addr", hostPort(ip, port), "incarnation", meta.Incarnation)
		}
		v.mu.Lock()
		if len(v.twins) < maxTwins || v.twins[name] != nil {
			v.twins[name] = &twin{name: name, ip: append(net.IP(nil), ip...), port: port, meta: meta, state: state}
		}
		v.mu.Unlock()
		return
	}
	addr := hostPort(ip, port)

	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.members[meta.ID]
	if e == nil {
		e = &memberEntry{instances: make(map[string]*instance)}
		v.members[meta.ID] = e
	}
	in := e.instances[name]
	if in == nil {
		v.seq++
		in = &instance{name: name, seq: v.seq, since: now}
		e.instances[name] = in
	}
	if in.state != state {
		in.since = now
	}
	in.meta, in.addr, in.state = meta, addr, state
	v.derive(e, now)
}

// derive recomputes e.current from its best instance and queues the event
// the change implies, if any. Caller holds v.mu.
func (v *view) derive(e *memberEntry, now time.Time) {
	best := e.best()
	if best == nil {
		return
	}
	next := Member{Meta: best.meta, Addr: best.addr, State: best.state}
	prev := e.current
	known := prev.ID != ""
	e.current = next
	if !known || prev.State != next.State {
		e.since = now
	}
	var kind EventKind
	switch {
	case !known || prev.State == StateDead || prev.State == StateLeft:
		switch {
		case next.State.Up():
			kind = EventJoin
		case known && prev.State == StateDead && next.State == StateLeft:
			kind = EventLeave
		}
	case next.State == StateDead:
		kind = EventFailed
	case next.State == StateLeft:
		kind = EventLeave
	case prev.Addr != next.Addr || !reflect.DeepEqual(prev.Meta, next.Meta):
		kind = EventUpdate
	}
	if kind != 0 {
		v.queue = append(v.queue, Event{Kind: kind, Member: next})
		select {
		case v.notify <- struct{}{}:
		default:
		}
	}
}

func (e *memberEntry) best() *instance {
	var best *instance
	for _, in := range e.instances {
		if best == nil || in.better(best) {
			best = in
		}
	}
	return best
}

// maxLeftNames bounds the left-instance list carried in push/pull state.
const maxLeftNames = 256

// leftNames returns up to limit instance names known to have left, most
// recent first.
func (v *view) leftNames(limit int) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	type left struct {
		name  string
		since time.Time
	}
	var all []left
	for _, e := range v.members {
		for name, in := range e.instances {
			if in.state == StateLeft {
				all = append(all, left{name, in.since})
			}
		}
	}
	// Most recent first, so the cap drops the oldest.
	sort.Slice(all, func(i, j int) bool {
		if !all[i].since.Equal(all[j].since) {
			return all[i].since.After(all[j].since)
		}
		return all[i].name < all[j].name
	})
	out := make([]string, 0, min(len(all), limit))
	for _, l := range all[:min(len(all), limit)] {
		out = append(out, l.name)
	}
	return out
}

// markLeft turns instances this view holds as dead into left ones (a peer
// saw their Leaving flag), queueing EventLeave where the member changes.
func (v *view) markLeft(names []string, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, name := range names {
		for _, e := range v.members {
			if in, ok := e.instances[name]; ok && in.state == StateDead {
				in.state, in.since = StateLeft, now
				v.derive(e, now)
			}
		}
	}
}

// encodeLeftNames encodes the push/pull state: version 1, count, names.
func encodeLeftNames(names []string) []byte {
	if len(names) == 0 {
		return nil
	}
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendString(b, n)
	}
	return b
}

// decodeLeftNames decodes encodeLeftNames' output; it never panics.
func decodeLeftNames(b []byte) ([]string, error) {
	if len(b) == 0 || b[0] != 1 {
		return nil, fmt.Errorf("%w: left-names state: bad version", ErrInvalidMeta)
	}
	d := metaDecoder{b: b[1:]}
	n := d.uvarint("count")
	if d.err == nil && (n > maxLeftNames || n > uint64(len(d.b))) {
		d.fail("left-names count %d too large", n)
	}
	var names []string
	for i := uint64(0); i < n && d.err == nil; i++ {
		names = append(names, d.string("name"))
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return names, nil
}

// reap forgets members dead or left for longer than timeout, and stale
// superseded instances, queueing EventReap.
func (v *view) reap(now time.Time, timeout time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ids := make([]string, 0, len(v.members))
	for id := range v.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := v.members[id]
		if id == v.localID {
			continue
		}
		cur := e.current
		if (cur.State == StateDead || cur.State == StateLeft) && now.Sub(e.since) > timeout {
			delete(v.members, id)
			v.queue = append(v.queue, Event{Kind: EventReap, Member: cur})
			select {
			case v.notify <- struct{}{}:
			default:
			}
			continue
		}
		best := e.best()
		for name, in := range e.instances {
			if in != best && in.state != StateAlive && now.Sub(in.since) > timeout {
				delete(e.instances, name)
			}
		}
	}
}

// take returns and clears the queued events.
func (v *view) take() []Event {
	v.mu.Lock()
	defer v.mu.Unlock()
	q := v.queue
	v.queue = nil
	return q
}

func (v *view) list() []Member {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]Member, 0, len(v.members))
	for _, e := range v.members {
		out = append(out, copyMember(e.current))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (v *view) get(id string) (Member, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.members[id]
	if !ok {
		return Member{}, false
	}
	return copyMember(e.current), true
}

// failedAddrs returns the addresses of members currently dead (not left),
// sorted.
func (v *view) failedAddrs() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, e := range v.members {
		if e.current.State == StateDead {
			out = append(out, e.current.Addr)
		}
	}
	sort.Strings(out)
	return out
}

// aliveAddrs returns the set of addresses of alive members.
func (v *view) aliveAddrs() map[string]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]bool, len(v.members))
	for _, e := range v.members {
		if e.current.State.Up() {
			out[e.current.Addr] = true
		}
	}
	return out
}

func copyMember(m Member) Member {
	if m.Tags != nil {
		tags := make(map[string]string, len(m.Tags))
		for k, v := range m.Tags {
			tags[k] = v
		}
		m.Tags = tags
	}
	return m
}

// coalescer merges events per member id until it is flushed.
type coalescer struct {
	pending map[string]Event
}

func (c *coalescer) add(e Event) {
	if c.pending == nil {
		c.pending = make(map[string]Event)
	}
	if old, ok := c.pending[e.Member.ID]; ok && old.Kind == EventJoin && e.Kind == EventUpdate {
		e.Kind = EventJoin
	}
	c.pending[e.Member.ID] = e
}

func (c *coalescer) empty() bool { return len(c.pending) == 0 }

func (c *coalescer) flush() []Event {
	out := make([]Event, 0, len(c.pending))
	for _, e := range c.pending {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Member.ID < out[j].Member.ID })
	c.pending = nil
	return out
}
