package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/google/btree"

	"github.com/tenurehq/tenure/internal/mutation"
)

// Client sessions (the Raft dissertation, §6.3; docs/ledger.md "Sessions").
//
// A command a node may retry after an unknown outcome travels wrapped in a
// Session carrying a request id. The FSM remembers, for a bounded window,
// the Result the first application of each request id produced; a later
// entry with the same id is not applied again but answers that Result
// (Result.Replayed set). So a retry after "outcome unknown" reports what the
// first try did: a keyed JobEnqueue that created its job says so
// (Duplicate false), an App command is applied once.
//
// The window is bounded by count (Config.MaxSessions) and by age
// (Config.SessionWindow, measured with the proposers' clocks: the wrapped
// command's Now). Past it an id is forgotten and an entry carrying it is
// applied as new. The table is replicated state: every replica evicts the
// same entries at the same log position, and snapshots carry it.

// KindSession is the wire kind of Session (encoding version 4).
const KindSession Kind = 17

// VersionRequestIDs is the cluster version from which proposers wrap
// retried commands in a Session (a binary of cluster version 1 cannot read
// encoding version 4).
const VersionRequestIDs uint32 = 2

// RequestID identifies one logical request across its retries. Nodes draw
// them at random (NewRequestID); applications may supply their own (any 16
// bytes that are unique per logical request, e.g. a UUIDv4). The zero id is
// invalid.
type RequestID [16]byte

// NewRequestID returns a random request id (crypto/rand: two ids collide
// with probability ~2^-128; among 2^32 live ids, ~2^-64).
func NewRequestID() RequestID {
	var id RequestID
	_, _ = rand.Read(id[:]) // never fails (crypto/rand.Read panics rather than return an error)
	return id
}

// IsZero reports whether id is the zero (invalid) id.
func (id RequestID) IsZero() bool { return id == RequestID{} }

// String is the id in hex.
func (id RequestID) String() string { return hex.EncodeToString(id[:]) }

// Session is Command tagged with a request id (encoding version 4). Command
// must not be a Batch or a Session. Proposers emit it only once the cluster
// runs version VersionRequestIDs (State.VersionActive); the FSM applies it
// whenever it sees one.
type Session struct {
	ID      RequestID
	Command Command
}

func (Session) kind() Kind { return KindSession }

func init() {
	register(kindSpec[Session]{
		kind: KindSession, name: "Session", since: 4,
		version: func(c Session) byte { return max(4, versionFor(c.Command)) },
		encode: func(w *writer, c Session) error {
			switch c.Command.(type) {
			case nil, Batch, Session:
				return fmt.Errorf("%w: a session wraps one command, not %T", ErrInvalid, c.Command)
			}
			if c.ID.IsZero() {
				return fmt.Errorf("%w: session with the zero request id", ErrInvalid)
			}
			w.b = append(w.b, c.ID[:]...)
			nested := w.nested
			w.nested = true // a session does not wrap a batch
			defer func() { w.nested = nested }()
			return encodeBody(w, c.Command)
		},
		decode: func(r *reader) Session {
			id := r.requestID()
			switch {
			case r.err != nil:
				return Session{}
			case id.IsZero():
				r.fail(fmt.Errorf("%w: session with the zero request id", ErrMalformed))
				return Session{}
			case len(r.b) > 0 && Kind(r.b[0]) == KindSession:
				r.fail(fmt.Errorf("%w: nested session", ErrMalformed))
				return Session{}
			}
			nested := r.nested
			r.nested = true // a session does not wrap a batch
			c := decodeBody(r)
			r.nested = nested
			if r.err != nil {
				return Session{}
			}
			return Session{ID: id, Command: c}
		},
		apply: func(f *FSM, index uint64, c Session) Result { return f.session(index, c) },
		// A request id changes nothing about who may propose what.
		who: whoWrapped,
		authorize: func(a authz, c Session) error {
			switch c.Command.(type) {
			case Batch, Session, nil:
				return a.deny("a session wraps one plain command")
			}
			return Authorize(a.st, a.p, c.Command)
		},
	})
}

// Unwrap returns the command inside a Session, and c itself otherwise.
func Unwrap(c Command) Command {
	if s, ok := c.(Session); ok {
		return s.Command
	}
	return c
}

// sessionEntry is one remembered request.
type sessionEntry struct {
	id    RequestID
	seq   uint64 // insertion order (eviction FIFO)
	now   int64  // the wrapped command's Now
	kind  Kind   // the wrapped command's kind and shard: a reused id with
	shard uint32 // another command is refused, not answered
	// digest is the request's body (RequestDigest), from cluster version
	// 5 on; zero for entries remembered before.
	digest Digest
	res    *Result
}

type sessionOrder struct {
	seq uint64
	id  RequestID
}

func newSessionTrees() (*btree.BTreeG[sessionEntry], *btree.BTreeG[sessionOrder]) {
	return btree.NewG(btreeDegree, func(a, b sessionEntry) bool { return lessID(a.id, b.id) }),
		btree.NewG(btreeDegree, func(a, b sessionOrder) bool { return a.seq < b.seq })
}

func lessID(a, b RequestID) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// SessionInfo is one remembered request (State.Sessions).
type SessionInfo struct {
	ID    RequestID
	Now   int64
	Kind  Kind
	Shard uint32
	// Result is the remembered result of the first application.
	Result Result
}

// Session returns the remembered result of request id, if it is still in
// the window.
func (s *State) Session(id RequestID) (SessionInfo, bool) {
	e, ok := s.sessions.Get(sessionEntry{id: id})
	if !ok {
		return SessionInfo{}, false
	}
	return SessionInfo{ID: e.id, Now: e.now, Kind: e.kind, Shard: e.shard, Result: *e.res}, true
}

// NumSessions is the number of remembered requests.
func (s *State) NumSessions() int { return s.sessions.Len() }

func (f *FSM) session(index uint64, c Session) Result {
	switch c.Command.(type) {
	case nil:
		return Result{Err: errf(ErrInvalid, "session %s with no command", c.ID)}
	case Batch, Session:
		return Result{Err: errf(ErrInvalid, "session %s wraps a %s", c.ID, KindOf(c.Command))}
	}
	if c.ID.IsZero() {
		return Result{Err: errf(ErrInvalid, "session with the zero request id")}
	}
	now, kind, shard := commandNow(c.Command), KindOf(c.Command), commandShard(c.Command)
	f.evictSessions(now, 0)
	bodies := f.st.VersionActive(VersionJobsAPI)
	var digest Digest
	if bodies {
		digest = RequestDigest(c.Command)
	}
	e, ok := f.st.sessions.Get(sessionEntry{id: c.ID})
	if ok && !mutation.On(mutation.RequestIDIgnored) {
		if bodies && (e.kind != kind || e.shard != shard || (e.digest != Digest{} && e.digest != digest)) {
			return Result{Err: errf(ErrRequestIDReused, "request id %s was used for another %s request on shard %d",
				c.ID, e.kind, e.shard)}
		}
		if e.kind != kind || e.shard != shard {
			return Result{Err: errf(ErrInvalid, "request id %s was used for %s on shard %d, not %s on shard %d",
				c.ID, e.kind, e.shard, kind, shard)}
		}
	}
	if ok && !mutation.On(mutation.SessionDedupOff) {
		r := *e.res
		if r.Job.ID != 0 {
			// The remembered job carries no payload or result (see
			// remember); the current record has them, if still kept.
			if j, ok := f.st.Job(r.Job.ID); ok {
				r.Job.Payload, r.Job.Result = j.Payload, j.Result
			}
		}
		r.Replayed = true
		return r
	}
	r := f.applyOne(index, c.Command)
	f.remember(c.ID, now, kind, shard, digest, r)
	return r
}

// remember stores r as the result of request id. The job's payload and
// result bytes are not kept (they are up to MaxPayload each, and the job
// record holds them while it is retained).
func (f *FSM) remember(id RequestID, now int64, kind Kind, shard uint32, digest Digest, r Result) {
	stored := r
	stored.Job.Payload, stored.Job.Result = nil, nil
	stored.Results = nil
	f.evictSessions(now, 1)
	f.st.sessionSeq++
	f.st.sessions.ReplaceOrInsert(sessionEntry{id: id, seq: f.st.sessionSeq, now: now, kind: kind, shard: shard, digest: digest, res: &stored})
	f.st.sessionOrder.ReplaceOrInsert(sessionOrder{seq: f.st.sessionSeq, id: id})
	f.dirty |= dirtySessions
}

// evictSessions drops, oldest first, the entries older than the window
// before now, and then as many as needed to leave room for more new ones
// under MaxSessions. Insertion order is log order, so the age check stops
// at the first entry young enough (entries of a proposer whose clock runs
// behind may live a little longer: the window is measured with proposers'
// clocks, like job retention).
func (f *FSM) evictSessions(now int64, room int) {
	window, limit := f.st.settings.SessionWindow, int(f.st.settings.MaxSessions)
	for {
		o, ok := f.st.sessionOrder.Min()
		if !ok {
			return
		}
		e, _ := f.st.sessions.Get(sessionEntry{id: o.id})
		if f.st.sessions.Len()+room <= limit && !after(now, e.now, window) {
			return
		}
		f.st.sessionOrder.DeleteMin()
		f.st.sessions.Delete(sessionEntry{id: o.id})
		f.dirty |= dirtySessions
	}
}

func encodeSessionEntry(w *writer, e sessionEntry) error {
	w.u(e.seq)
	w.b = append(w.b, e.id[:]...)
	w.i(e.now)
	w.u(uint64(e.kind))
	w.u(uint64(e.shard))
	if w.ver >= snapshotJobsAPI {
		w.b = append(w.b, e.digest[:]...)
	}
	return encodeResult(w, *e.res, 1) // depth 1: no sub-results
}

func decodeSessionEntry(r *reader) sessionEntry {
	e := sessionEntry{seq: r.u()}
	e.id = r.requestID()
	e.now = r.i()
	e.kind = Kind(r.u8())
	e.shard = r.u32()
	if r.ver >= snapshotJobsAPI {
		e.digest = Digest(r.requestID())
	}
	res := decodeResult(r, 1)
	e.res = &res
	return e
}

func (r *reader) requestID() RequestID {
	var id RequestID
	if r.err != nil {
		return id
	}
	if len(r.b) < len(id) {
		r.fail(fmt.Errorf("%w: truncated request id (%d bytes left)", ErrMalformed, len(r.b)))
		return id
	}
	copy(id[:], r.b)
	r.b = r.b[len(id):]
	return id
}
