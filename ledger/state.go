package ledger

import (
	"cmp"
	"slices"
	"strings"

	"github.com/google/btree"

	"github.com/tenurehq/tenure/internal/changefeed"
)

const btreeDegree = 8 // smaller nodes: less to copy per copy-on-write path (measured vs 4, 16, 32)

type jobIndexKey struct {
	shard uint32
	state JobState
	id    uint64
}

type jobKeyKey struct {
	shard uint32
	key   string
	id    uint64
}

// jobItem keys the jobs tree by id; lookups build one on the stack.
type jobItem struct {
	id uint64
	j  *JobRecord
}

type finishedKey struct {
	seq uint64
	id  uint64
}

// State is an immutable view of the ledger at one applied index. It is safe
// to use from any goroutine; the FSM never changes a State it has published
// (its trees are copy-on-write clones). Byte slices inside returned records
// are shared with the State: do not modify them.
type State struct {
	shards   *btree.BTreeG[ShardRecord]
	nodes    *btree.BTreeG[NodeRecord]
	jobs     *btree.BTreeG[jobItem]
	jobIdx   *btree.BTreeG[jobIndexKey] // (shard, state, id)
	keyIdx   *btree.BTreeG[jobKeyKey]   // (shard, key) -> id, idempotency keys
	finished *btree.BTreeG[finishedKey] // finished jobs in finishing order

	elections  *btree.BTreeG[ElectionRecord] // by (group, name); published with the shards
	partitions uint32                        // recorded by the first DeclareElection

	pins     *btree.BTreeG[PinRecord]     // operator pins by shard; published with the shards
	excluded *btree.BTreeG[ExcludeRecord] // operator exclusions by node; published with the shards
	fenced   []ShardRange                 // shards under fenced takeover (takeover.go); replaced, never modified
	revoked  []Revocation                 // the deny-list by (node, serial) (revoke.go); replaced, never modified
	// revokedIdx indexes revoked (setRevoked); replaced with it.
	revokedIdx map[string]int

	sessions     *btree.BTreeG[sessionEntry] // remembered requests by id (session.go)
	sessionOrder *btree.BTreeG[sessionOrder] // the same, in insertion order
	sessionSeq   uint64                      // last session insertion number

	cluster   ClusterInfo // the committed ClusterConfig
	settings  LedgerSettings
	nextJob   uint64 // last assigned job id
	finishSeq uint64 // last finishing sequence number
	applied   uint64
	// logTime is the log's clock (VersionLogTime): the largest leader
	// append time (unix ns) of the entries applied since the version was
	// active; 0 before.
	logTime int64
	// ownership is the OwnershipGeneration; changes what changed to
	// reach it (changefeed.go).
	ownership uint64
	changes   *changefeed.Link
}

func newStateTables(s LedgerSettings) *State {
	return &State{
		shards: btree.NewG(btreeDegree, func(a, b ShardRecord) bool { return a.Shard < b.Shard }),
		nodes:  btree.NewG(btreeDegree, func(a, b NodeRecord) bool { return a.ID < b.ID }),
		jobs:   btree.NewG(btreeDegree, func(a, b jobItem) bool { return a.id < b.id }),
		jobIdx: btree.NewG(btreeDegree, func(a, b jobIndexKey) bool {
			if a.shard != b.shard {
				return a.shard < b.shard
			}
			if a.state != b.state {
				return a.state < b.state
			}
			return a.id < b.id
		}),
		keyIdx: btree.NewG(btreeDegree, func(a, b jobKeyKey) bool {
			if a.shard != b.shard {
				return a.shard < b.shard
			}
			if c := strings.Compare(a.key, b.key); c != 0 {
				return c < 0
			}
			return a.id < b.id
		}),
		finished: btree.NewG(btreeDegree, func(a, b finishedKey) bool {
			return cmp.Or(cmp.Compare(a.seq, b.seq), cmp.Compare(a.id, b.id)) < 0
		}),
		elections: newElectionTree(),
		pins:      newPinTree(),
		excluded:  newExcludeTree(),
		settings:  s,
	}
}

func newState(s LedgerSettings) *State {
	st := newStateTables(s)
	st.sessions, st.sessionOrder = newSessionTrees()
	return st
}

// clone returns a copy sharing structure; both may be used independently
// (the writer's next changes copy the nodes they touch).
func (s *State) clone() *State {
	c := *s
	c.shards = s.shards.Clone()
	c.nodes = s.nodes.Clone()
	c.jobs = s.jobs.Clone()
	c.jobIdx = s.jobIdx.Clone()
	c.keyIdx = s.keyIdx.Clone()
	c.finished = s.finished.Clone()
	c.elections = s.elections.Clone()
	c.pins, c.excluded = s.pins.Clone(), s.excluded.Clone()
	c.sessions = s.sessions.Clone()
	c.sessionOrder = s.sessionOrder.Clone()
	return &c
}

// AppliedIndex is the log index of the last applied command.
func (s *State) AppliedIndex() uint64 { return s.applied }

// Settings returns the replicated settings.
func (s *State) Settings() LedgerSettings { return s.settings }

// Shard returns a shard's record. A shard never granted is absent (and
// behaves as Unowned at epoch 0).
func (s *State) Shard(id uint32) (ShardRecord, bool) {
	return s.shards.Get(ShardRecord{Shard: id})
}

// Shards returns every shard record, sorted by shard.
func (s *State) Shards() []ShardRecord {
	out := make([]ShardRecord, 0, s.shards.Len())
	s.shards.Ascend(func(r ShardRecord) bool { out = append(out, r); return true })
	return out
}

// ShardCount is how many shard records the state holds.
func (s *State) ShardCount() int { return s.shards.Len() }

// EachShard calls f with every shard record in shard order until f
// returns false; it copies nothing (Shards copies them all into a slice).
func (s *State) EachShard(f func(ShardRecord) bool) { s.shards.Ascend(f) }

// Node returns a node's liveness record.
func (s *State) Node(id string) (NodeRecord, bool) {
	return s.nodes.Get(NodeRecord{ID: id})
}

// OwnershipGeneration is a number that changes whenever a shard record,
// or a node's incarnation or liveness (what OwnershipValid reads), may
// have changed since the state before: two states with the same number
// have the same shard records and the same valid owners. A reader that
// derives something from every shard (an ownership view, events) redoes
// it only when the number moves; heartbeats, which change neither, leave
// it alone. In memory only; never on the wire or on disk.
func (s *State) OwnershipGeneration() uint64 { return s.ownership }

// Nodes returns every node record, sorted by id.
func (s *State) Nodes() []NodeRecord {
	out := make([]NodeRecord, 0, s.nodes.Len())
	s.nodes.Ascend(func(r NodeRecord) bool { out = append(out, r); return true })
	return out
}

// OwnershipValid reports whether rec's ownership is valid (docs/protocol.md):
// State is Owned or Revoking and the owner's NodeRecord still has exactly
// rec's OwnerIncarnation and OwnerLiveness.
func (s *State) OwnershipValid(rec ShardRecord) bool {
	if rec.State != ShardOwned && rec.State != ShardRevoking {
		return false
	}
	n, ok := s.Node(rec.Owner)
	return OwnershipValidWith(rec, n, ok)
}

// OwnershipValidWith is OwnershipValid with the owner's node record
// already read (found: the state has one), for a reader that decides many
// shards of few owners from one state.
func OwnershipValidWith(rec ShardRecord, owner NodeRecord, found bool) bool {
	return (rec.State == ShardOwned || rec.State == ShardRevoking) &&
		found && owner.ID == rec.Owner && owner.Incarnation == rec.OwnerIncarnation && owner.Liveness == rec.OwnerLiveness
}

// ValidOwner returns the shard's record when its ownership is valid.
func (s *State) ValidOwner(shard uint32) (ShardRecord, bool) {
	rec, ok := s.Shard(shard)
	if !ok || !s.OwnershipValid(rec) {
		return ShardRecord{}, false
	}
	return rec, true
}

// Job returns a job by id.
func (s *State) Job(id uint64) (JobRecord, bool) {
	it, ok := s.jobs.Get(jobItem{id: id})
	if !ok {
		return JobRecord{}, false
	}
	return *it.j, true
}

// JobByKey returns the retained job enqueued on shard with idempotency key.
func (s *State) JobByKey(shard uint32, key string) (JobRecord, bool) {
	id, ok := s.jobIDByKey(shard, key)
	if !ok {
		return JobRecord{}, false
	}
	return s.Job(id)
}

func (s *State) jobIDByKey(shard uint32, key string) (uint64, bool) {
	var id uint64
	found := false
	s.keyIdx.AscendGreaterOrEqual(jobKeyKey{shard: shard, key: key}, func(k jobKeyKey) bool {
		if k.shard == shard && k.key == key {
			id, found = k.id, true
		}
		return false
	})
	return id, found
}

// Jobs returns a shard's jobs in state st, sorted by id.
func (s *State) Jobs(shard uint32, st JobState) []JobRecord {
	var out []JobRecord
	s.jobIdx.AscendRange(jobIndexKey{shard: shard, state: st}, jobIndexKey{shard: shard, state: st + 1},
		func(k jobIndexKey) bool {
			if it, ok := s.jobs.Get(jobItem{id: k.id}); ok {
				out = append(out, *it.j)
			}
			return true
		})
	return out
}

// CountJobs counts a shard's jobs in state st, stopping at limit when
// limit > 0. It copies no records.
func (s *State) CountJobs(shard uint32, st JobState, limit int) int {
	n := 0
	s.jobIdx.AscendRange(jobIndexKey{shard: shard, state: st}, jobIndexKey{shard: shard, state: st + 1},
		func(jobIndexKey) bool {
			n++
			return limit <= 0 || n < limit
		})
	return n
}

// AllJobs returns every retained job, sorted by id.
func (s *State) AllJobs() []JobRecord {
	out := make([]JobRecord, 0, s.jobs.Len())
	s.jobs.Ascend(func(it jobItem) bool { out = append(out, *it.j); return true })
	return out
}

// NumJobs is the number of retained jobs.
func (s *State) NumJobs() int { return s.jobs.Len() }

// RunnableJobs returns the shard's jobs a JobStart at time now could
// start: pending ones whose backoff has ended, and started ones whose
// attempt began at an older epoch of the shard (fenced out) or timed out,
// sorted by id. (The start is still subject to the ownership rules.)
func (s *State) RunnableJobs(shard uint32, now int64) []JobRecord {
	epoch := uint64(0)
	if rec, ok := s.Shard(shard); ok {
		epoch = rec.Epoch
	}
	var out []JobRecord
	for _, st := range []JobState{JobPending, JobStarted} {
		for _, j := range s.Jobs(shard, st) {
			if j.Runnable(epoch, now) {
				out = append(out, j)
			}
		}
	}
	slices.SortFunc(out, func(a, b JobRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// OwnedBy returns the shards whose valid owner is node, sorted by shard.
func (s *State) OwnedBy(node string) []ShardRecord {
	var out []ShardRecord
	s.shards.Ascend(func(r ShardRecord) bool {
		if r.Owner == node && s.OwnershipValid(r) {
			out = append(out, r)
		}
		return true
	})
	return out
}

// LogTime returns the log's clock (unix ns): the latest leader append time
// of the applied entries, never going back; 0 until the cluster runs
// VersionLogTime. Job transitions are judged by it once it is set.
func (s *State) LogTime() int64 { return s.logTime }
