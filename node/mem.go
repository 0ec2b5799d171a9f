package node

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// MemNetwork is an in-process cluster for tests and examples: nodes started
// with the same MemNetwork in Config.Network form one cluster without
// sockets or files.
//
// A MemNetwork commits instantly and never loses a message: ownership
// moves as soon as membership changes (a revoked owner still drains and
// hands over, as on a real cluster), and leases never expire while a node
// runs. It shows the API's behaviour, not its timing; use a real cluster
// (or the simulator) for failure timing.
type MemNetwork struct {
	mu          sync.Mutex
	partitions  int
	minHealth   float64
	index       uint64
	nodes       map[string]*memNode
	shards      map[uint32]*ShardInfo
	elections   map[string]uint32 // group + "\x00" + name -> shard
	electionOf  map[uint32]memElection
	excluded    map[uint32]string // shard -> node that resigned it
	jobs        map[uint64]*Job
	jobKeys     map[memJobKey]uint64
	nextJob     uint64
	appLog      []memEntry
	requests    map[RequestID]memRequest // Propose outcomes by request id
	requestLog  []RequestID              // insertion order, for the bound
	incarnation map[string]uint64
	// wrap, when set (tests), wraps every backend the network hands out.
	wrap func(backend) backend
}

type memElection struct{ group, name string }

type memJobKey struct {
	shard uint32
	key   string
}

type memEntry struct {
	index   uint64
	shard   uint32
	epoch   uint64
	typ     string
	payload []byte
}

type memNode struct {
	id, group, httpAddr string
	inc                 uint64
	health              float64
	meta, tags          map[string]string
	draining            bool
	alive               bool
	updatedAt           time.Time
	sms                 map[string]StateMachine
	applied             uint64
	notify              func()
	resigned            map[uint32]uint64 // shard -> epoch the application gave up
}

// NewMemNetwork returns an empty in-process cluster.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{
		nodes:       make(map[string]*memNode),
		shards:      make(map[uint32]*ShardInfo),
		elections:   make(map[string]uint32),
		electionOf:  make(map[uint32]memElection),
		excluded:    make(map[uint32]string),
		jobs:        make(map[uint64]*Job),
		jobKeys:     make(map[memJobKey]uint64),
		incarnation: make(map[string]uint64),
	}
}

func (m *MemNetwork) backend(_ context.Context, cfg Config, notify func()) (backend, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.partitions == 0 {
		m.partitions, m.minHealth = cfg.Partitions, cfg.MinHealth
	} else if m.partitions != cfg.Partitions {
		return nil, fmt.Errorf("node: Partitions %d differs from the cluster's %d", cfg.Partitions, m.partitions)
	}
	if old, ok := m.nodes[cfg.NodeID]; ok && old.alive {
		return nil, fmt.Errorf("node: id %q is already running on this network", cfg.NodeID)
	}
	m.incarnation[cfg.NodeID]++
	mn := &memNode{
		id: cfg.NodeID, group: cfg.Group, httpAddr: cfg.HTTPAddr,
		inc: m.incarnation[cfg.NodeID], health: 1, tags: maps.Clone(cfg.Tags),
		alive: true, updatedAt: time.Now(), sms: cfg.StateMachines, notify: notify,
	}
	// A restarted node rebuilds its application state from the log.
	for _, e := range m.appLog {
		if sm := mn.sms[e.typ]; sm != nil {
			_, _ = sm.Apply(e.shard, e.epoch, e.index, e.payload)
		}
	}
	mn.applied = m.index
	m.nodes[cfg.NodeID] = mn
	m.rebalance()
	var be backend = &memBackend{net: m, self: mn}
	if m.wrap != nil {
		be = m.wrap(be)
	}
	return be, nil
}

// eligible reports whether n may be given shards.
func (m *MemNetwork) eligible(n *memNode) bool {
	return n != nil && n.alive && !n.draining && n.health >= m.minHealth
}

// target picks a shard's owner by rendezvous hashing over the eligible
// nodes (of the election's group for a group election's shard).
func (m *MemNetwork) target(s uint32) string {
	group := ""
	if e, ok := m.electionOf[s]; ok {
		group = e.group
	}
	ids := sortedKeys(m.nodes)
	pick := func(skip string) string {
		best, bestH := "", uint64(0)
		for _, id := range ids {
			n := m.nodes[id]
			if !m.eligible(n) || (group != "" && n.group != group) || id == skip {
				continue
			}
			if h := xxhash.Sum64String(id + "/" + strconv.FormatUint(uint64(s), 10)); best == "" || h > bestH {
				best, bestH = id, h
			}
		}
		return best
	}
	if t := pick(m.excluded[s]); t != "" {
		return t
	}
	return pick("")
}

func (m *MemNetwork) shardIDs() []uint32 {
	ids := make([]uint32, 0, m.partitions+len(m.electionOf))
	for s := 0; s < m.partitions; s++ {
		ids = append(ids, uint32(s))
	}
	return append(ids, sortedShards(m.electionOf)...)
}

// rebalance moves shards toward their targets; m.mu held.
func (m *MemNetwork) rebalance() {
	now := time.Now()
	for _, s := range m.shardIDs() {
		rec := m.shards[s]
		if rec == nil {
			rec = &ShardInfo{Shard: s}
			m.shards[s] = rec
		}
		if e, ok := m.electionOf[s]; ok {
			rec.Election = e.name
		}
		t := m.target(s)
		owner := m.nodes[rec.Owner]
		valid := rec.State != ShardUnowned && owner != nil && owner.alive
		switch {
		case !valid && t != "":
			m.index++
			*rec = ShardInfo{Shard: s, Epoch: rec.Epoch + 1, Owner: t, State: ShardOwned, Valid: true,
				Election: rec.Election, ChangedAt: now, Reason: "grant"}
			delete(m.excluded, s)
		case !valid:
			rec.State, rec.Valid = ShardUnowned, false
		case rec.State == ShardOwned && t != rec.Owner && (t != "" || !m.eligible(owner)):
			m.index++
			rec.State, rec.Target, rec.ChangedAt, rec.Reason = ShardRevoking, t, now, "rebalance"
		}
	}
	m.notifyAll()
}

func (m *MemNetwork) notifyAll() {
	for _, id := range sortedKeys(m.nodes) {
		if n := m.nodes[id]; n.alive {
			n.applied = m.index
			n.notify()
		}
	}
}

// memBackend is one node's view of a MemNetwork.
type memBackend struct {
	net  *MemNetwork
	self *memNode
}

var _ backend = (*memBackend)(nil)

func (b *memBackend) lock() func() {
	b.net.mu.Lock()
	return b.net.mu.Unlock
}

func (b *memBackend) incarnation() uint64 { return b.self.inc }

func (b *memBackend) appliedIndex() uint64 {
	defer b.lock()()
	return b.self.applied
}

func (b *memBackend) shard(s uint32) (ShardInfo, bool) {
	defer b.lock()()
	rec, ok := b.net.shards[s]
	if !ok {
		return ShardInfo{}, false
	}
	return *rec, true
}

func (b *memBackend) shards() []ShardInfo {
	defer b.lock()()
	out := make([]ShardInfo, 0, len(b.net.shards))
	for _, s := range sortedShards(b.net.shards) {
		out = append(out, *b.net.shards[s])
	}
	return out
}

func (b *memBackend) acting(s uint32, now time.Time) (actingState, bool) {
	defer b.lock()()
	rec, ok := b.net.shards[s]
	if !ok || !b.self.alive || rec.Owner != b.self.id || rec.State == ShardUnowned {
		return actingState{}, false
	}
	if e, ok := b.self.resigned[s]; ok && e == rec.Epoch {
		return actingState{}, false
	}
	return actingState{epoch: rec.Epoch, until: now.Add(time.Hour), revoking: rec.State == ShardRevoking}, true
}

func (b *memBackend) resigned(s uint32, epoch uint64) {
	defer b.lock()()
	if b.self.resigned == nil {
		b.self.resigned = make(map[uint32]uint64)
	}
	b.self.resigned[s] = epoch
}

func (b *memBackend) members() []Member {
	defer b.lock()()
	leader := b.leaderLocked()
	var out []Member
	for _, id := range sortedKeys(b.net.nodes) {
		n := b.net.nodes[id]
		st := MemberAlive
		if !n.alive {
			st = MemberLeft
		}
		out = append(out, Member{
			ID: n.id, Group: n.group, Incarnation: n.inc, Addr: "mem:" + n.id, HTTPAddr: n.httpAddr,
			State: st, Health: n.health, Metadata: maps.Clone(n.meta), Tags: maps.Clone(n.tags),
			Draining: n.draining, Live: n.alive, Voter: n.alive, Leader: n.id == leader, UpdatedAt: n.updatedAt,
		})
	}
	return out
}

func (b *memBackend) leaderLocked() string {
	for _, id := range sortedKeys(b.net.nodes) {
		if b.net.nodes[id].alive {
			return id
		}
	}
	return ""
}

func (b *memBackend) liveNodes() []string {
	defer b.lock()()
	var out []string
	for _, id := range sortedKeys(b.net.nodes) {
		if b.net.nodes[id].alive {
			out = append(out, id)
		}
	}
	return out
}

func (b *memBackend) control() controlInfo {
	defer b.lock()()
	c := controlInfo{leader: b.leaderLocked(), quorum: b.self.alive}
	c.isLeader = c.leader == b.self.id
	for _, id := range sortedKeys(b.net.nodes) {
		if b.net.nodes[id].alive {
			c.voters = append(c.voters, id)
		}
	}
	return c
}

func (b *memBackend) lease() leaseInfo {
	defer b.lock()()
	now := time.Now()
	if !b.self.alive {
		return leaseInfo{registered: true}
	}
	return leaseInfo{registered: true, leaseEnd: now.Add(time.Hour), lastAck: now}
}

// setLoad: a MemNetwork places by rendezvous alone and ignores loads.
func (b *memBackend) setLoad(string) error { return nil }

func (b *memBackend) setHealth(score float64, meta map[string]string) error {
	defer b.lock()()
	b.self.health, b.self.meta, b.self.updatedAt = score, meta, time.Now()
	b.net.rebalance()
	return nil
}

func (b *memBackend) setDraining(_ context.Context, draining bool) error {
	defer b.lock()()
	if !b.self.alive {
		return ErrClosed
	}
	b.self.draining = draining
	b.net.index++
	b.net.rebalance()
	return nil
}

func (b *memBackend) handoff(_ context.Context, s uint32, epoch uint64) error {
	defer b.lock()()
	rec := b.net.shards[s]
	if rec == nil || rec.Epoch != epoch || rec.Owner != b.self.id || rec.State != ShardRevoking {
		return ErrStaleToken
	}
	b.net.index++
	if t := b.net.nodes[rec.Target]; b.net.eligible(t) {
		*rec = ShardInfo{Shard: s, Epoch: epoch + 1, Owner: t.id, State: ShardOwned, Valid: true,
			Election: rec.Election, ChangedAt: time.Now(), Reason: "transfer from " + b.self.id}
	} else {
		rec.State, rec.Valid, rec.Target, rec.Reason = ShardUnowned, false, "", "release"
	}
	b.net.rebalance()
	return nil
}

func (b *memBackend) resign(_ context.Context, s uint32, epoch uint64) error {
	defer b.lock()()
	rec := b.net.shards[s]
	if rec == nil || rec.Epoch != epoch || rec.Owner != b.self.id || rec.State == ShardUnowned {
		return ErrStaleToken
	}
	b.net.index++
	rec.State, rec.Valid, rec.Reason = ShardUnowned, false, "resign"
	b.net.excluded[s] = b.self.id
	b.net.rebalance()
	return nil
}

func (b *memBackend) electionShard(_ context.Context, group, name string) (uint32, error) {
	defer b.lock()()
	key := group + "\x00" + name
	if s, ok := b.net.elections[key]; ok {
		return s, nil
	}
	s := uint32(b.net.partitions + len(b.net.elections))
	b.net.elections[key] = s
	b.net.electionOf[s] = memElection{group: group, name: group + "/" + name}
	b.net.index++
	b.net.rebalance()
	return s, nil
}

// fenced checks tok against the committed table; m.mu held.
func (b *memBackend) fenced(tok Token) error {
	rec := b.net.shards[tok.Shard]
	if rec == nil || rec.Epoch != tok.Epoch || rec.State == ShardUnowned || !b.net.nodes[rec.Owner].alive {
		return ErrStaleToken
	}
	return nil
}

func (b *memBackend) propose(_ context.Context, tok Token, typ string, payload []byte, id RequestID) (Applied, error) {
	defer b.lock()()
	if !b.self.alive {
		return Applied{}, ErrClosed
	}
	if id.IsZero() {
		return b.proposeLocked(tok, typ, payload)
	}
	// The in-memory network never loses an outcome, but a caller's own
	// retry with a request id is answered as the ledger would: the first
	// application's outcome, applied once.
	if r, ok := b.net.requests[id]; ok {
		b.net.index++
		a := r.a
		a.Index, a.Replayed = b.net.index, true
		return a, r.err
	}
	before := b.net.index
	a, err := b.proposeLocked(tok, typ, payload)
	a.RequestID = id
	if b.net.index != before { // applied (fenced refusals are not remembered here)
		if b.net.requests == nil {
			b.net.requests = map[RequestID]memRequest{}
		}
		b.net.requests[id] = memRequest{a, err}
		b.net.requestLog = append(b.net.requestLog, id)
		if len(b.net.requestLog) > maxMemRequests {
			delete(b.net.requests, b.net.requestLog[0])
			b.net.requestLog = b.net.requestLog[1:]
		}
	}
	return a, err
}

type memRequest struct {
	a   Applied
	err error
}

func (b *memBackend) proposeLocked(tok Token, typ string, payload []byte) (Applied, error) {
	if err := b.fenced(tok); err != nil {
		return Applied{}, err
	}
	b.net.index++
	e := memEntry{index: b.net.index, shard: tok.Shard, epoch: tok.Epoch, typ: typ, payload: append([]byte(nil), payload...)}
	b.net.appLog = append(b.net.appLog, e)
	var res []byte
	var resErr error
	for _, id := range sortedKeys(b.net.nodes) {
		n := b.net.nodes[id]
		if !n.alive || n.sms[typ] == nil {
			continue
		}
		r, err := n.sms[typ].Apply(e.shard, e.epoch, e.index, e.payload)
		if n == b.self {
			res, resErr = r, err
		}
	}
	b.net.notifyAll()
	if resErr != nil {
		return Applied{Index: e.index}, resErr
	}
	return Applied{Index: e.index, Result: res}, nil
}

func (b *memBackend) pendingJobs(shard uint32, limit int) int {
	defer b.lock()()
	n := 0
	for _, j := range b.net.jobs {
		if j.Shard == shard && j.State == JobPending {
			n++
			if limit > 0 && n == limit {
				break
			}
		}
	}
	return n
}

func (b *memBackend) enqueueJob(_ context.Context, shard uint32, spec JobSpec) (Job, bool, error) {
	defer b.lock()()
	key := memJobKey{shard, spec.Key}
	if id, ok := b.net.jobKeys[key]; ok && spec.Key != "" {
		return cloneJob(*b.net.jobs[id]), false, nil
	}
	b.net.index++
	b.net.nextJob++
	if spec.MaxAttempts == 0 {
		spec.MaxAttempts = 5
	}
	j := &Job{
		ID: b.net.nextJob, Shard: shard, Key: spec.Key, Type: spec.Type, Payload: append([]byte(nil), spec.Payload...),
		State: JobPending, MaxAttempts: uint32(spec.MaxAttempts), EnqueuedAt: time.Now(),
	}
	b.net.jobs[j.ID] = j
	if spec.Key != "" {
		b.net.jobKeys[key] = j.ID
	}
	b.net.notifyAll()
	return cloneJob(*j), true, nil
}

func (b *memBackend) startJob(_ context.Context, tok Token, id uint64, attempt uint32, timeout time.Duration) (Job, error) {
	defer b.lock()()
	j, ok := b.net.jobs[id]
	if !ok || j.Shard != tok.Shard {
		return Job{}, ErrJobNotFound
	}
	if err := b.fenced(tok); err != nil {
		return cloneJob(*j), err
	}
	if b.net.shards[tok.Shard].State != ShardOwned || b.net.shards[tok.Shard].Owner != b.self.id {
		return cloneJob(*j), ErrNotOwner
	}
	now := time.Now()
	if j.State.Finished() || j.Attempt != attempt || !runnableAt(*j, b.net.shards[tok.Shard].Epoch, now) {
		return cloneJob(*j), fmt.Errorf("job %d is %s (attempt %d, asked %d): %w", j.ID, j.State, j.Attempt, attempt, ErrJobState)
	}
	b.net.index++
	if j.State == JobStarted && j.Attempt >= j.MaxAttempts {
		j.State, j.FinishedAt, j.Error = JobDead, now, "attempts exhausted"
		b.net.notifyAll()
		return cloneJob(*j), fmt.Errorf("job %d dead-lettered: %w", j.ID, ErrJobState)
	}
	j.Attempt++
	j.State, j.Owner, j.Epoch, j.StartedAt, j.Timeout = JobStarted, b.self.id, tok.Epoch, now, timeout
	b.net.notifyAll()
	return cloneJob(*j), nil
}

func (b *memBackend) finishJob(_ context.Context, tok Token, id uint64, attempt uint32, out jobOutcome) (Job, error) {
	defer b.lock()()
	j, ok := b.net.jobs[id]
	if !ok || j.Shard != tok.Shard {
		return Job{}, ErrJobNotFound
	}
	if j.State.Finished() {
		return cloneJob(*j), fmt.Errorf("job %d is %s: %w", j.ID, j.State, ErrJobState)
	}
	if err := b.fenced(tok); err != nil {
		return cloneJob(*j), err
	}
	if j.State != JobStarted || j.Attempt != attempt || j.Epoch != tok.Epoch {
		return cloneJob(*j), fmt.Errorf("job %d is %s (attempt %d at epoch %d): %w", j.ID, j.State, j.Attempt, j.Epoch, ErrJobState)
	}
	b.net.index++
	now := time.Now()
	switch {
	case out.ok:
		j.State, j.Result, j.FinishedAt = JobCompleted, append([]byte(nil), out.result...), now
	case j.Attempt < j.MaxAttempts:
		j.State, j.Error, j.NotBefore = JobPending, out.reason, now.Add(out.backoff)
	default:
		j.State, j.Error, j.FinishedAt = JobDead, out.reason, now
	}
	b.net.notifyAll()
	return cloneJob(*j), nil
}

func (b *memBackend) job(id uint64) (Job, bool) {
	defer b.lock()()
	j, ok := b.net.jobs[id]
	if !ok {
		return Job{}, false
	}
	return cloneJob(*j), true
}

func (b *memBackend) jobByKey(shard uint32, key string) (Job, bool) {
	defer b.lock()()
	id, ok := b.net.jobKeys[memJobKey{shard, key}]
	if !ok {
		return Job{}, false
	}
	return cloneJob(*b.net.jobs[id]), true
}

func (b *memBackend) jobs(q JobQuery) []Job {
	defer b.lock()()
	var out []Job
	for _, j := range b.net.jobs {
		if q.match(*j) {
			out = append(out, cloneJob(*j))
		}
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Shard != out[k].Shard {
			return out[i].Shard < out[k].Shard
		}
		return out[i].ID < out[k].ID
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

func (b *memBackend) close(context.Context) error {
	defer b.lock()()
	if !b.self.alive {
		return nil
	}
	b.self.alive = false
	b.net.index++
	b.net.rebalance()
	return nil
}

func cloneJob(j Job) Job {
	j.Payload = append([]byte(nil), j.Payload...)
	j.Result = append([]byte(nil), j.Result...)
	return j
}

// maxMemRequests bounds the in-memory network's request table, as
// ledger.DefaultMaxSessions bounds the ledger's.
const maxMemRequests = 65_536
