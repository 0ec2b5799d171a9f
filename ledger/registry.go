package ledger

import (
	"crypto/sha256"
	"fmt"
)

// The command registry: one declaration per command kind, read by every
// place that used to switch on kinds (encode, decode, apply, sessions,
// Authorize, the request digest, Touched and FormatCommand). A kind is
// declared once, next to its type, by an init func calling register; adding
// a command kind is one file: its type with a kind() method, its Kind
// constant (stable forever) and its kindSpec. CockroachDB's batcheval
// command registry is the model.

// kindSpec declares one command kind C. Fields marked optional may be nil.
type kindSpec[C Command] struct {
	kind Kind
	name string // Kind.String
	// since is the encoding version that introduced the kind: Encode
	// refuses to write it, and Decode to read it, in an older entry.
	// Zero means version 1.
	since byte
	// version (optional) is the oldest encoding version that can express
	// c, when a field added later needs a newer one than since (a later
	// field with its zero value is not written, so old nodes keep reading
	// the entry).
	version func(c C) byte
	// fields declares c's wire layout once: it walks c's fields in
	// declaration order through cd (codec), skipping fields newer than
	// the entry's version (cd.has), and returns c. Encode runs it to write
	// c (string fields over MaxStringLen fail it), Decode to read c into
	// the zero value (fields newer than the entry stay zero).
	fields func(cd codec, c C) C
	// encode and decode (only when fields is nil: Batch, Session) write
	// c's fields after the version and kind bytes and read them back. Both
	// see w.nested / r.nested: whether the command sits inside a Batch or
	// Session.
	encode func(w *writer, c C) error
	decode func(r *reader) C
	// apply (optional: the kind is then refused with ErrInvalid) applies
	// c at log index. It runs on the apply goroutine with f.mu held.
	apply func(f *FSM, index uint64, c C) Result
	// who is the "who may propose it" column of docs/security.md;
	// authorize (optional: then only the leader proposes it) is the check
	// Authorize runs for a command a peer forwards.
	who       string
	authorize func(a authz, c C) error
	// sessionNow and sessionShard (optional: 0) are the proposer's clock
	// and the shard a Session wrapping c is remembered with. Both are
	// replicated state (snapshots carry them): never change what a kind
	// returns.
	sessionNow   func(c C) int64
	sessionShard func(c C) uint32
	// digest (optional: the zero Digest) writes the part of c a request
	// id stands for (RequestDigest).
	digest func(w *writer, c C)
	// touches (optional: nothing) are the node ids and shards whose
	// records c can change (Touched).
	touches func(c C) (nodes []string, shards []uint32)
	// format (optional: the Go type) renders c in one short line
	// (FormatCommand).
	format func(c C) string
}

// kindEntry is a declaration with the command type erased: what the
// dispatchers read.
type kindEntry = kindSpec[Command]

// kinds is the registry, indexed by Kind. It is filled by init funcs and
// read-only afterwards.
var kinds [256]*kindEntry

// fencedOwner completes the declaration of a command the shard's owner
// proposes at an epoch (JobStart, JobComplete, JobFail, App): only the owner
// proposes it; a forwarded one is fenced at its shard and epoch (unless s
// authorizes it itself); a Session wrapping it is remembered with its
// shard and clock.
func fencedOwner[C Command](s kindSpec[C], at func(c C) (shard uint32, epoch uint64, now int64)) kindSpec[C] {
	s.who = whoOwner
	if s.authorize == nil {
		s.authorize = func(a authz, c C) error {
			shard, epoch, _ := at(c)
			return a.fenced(shard, epoch)
		}
	}
	s.sessionNow = func(c C) int64 {
		_, _, now := at(c)
		return now
	}
	s.sessionShard = func(c C) uint32 {
		shard, _, _ := at(c)
		return shard
	}
	return s
}

// register declares a command kind. It panics (at program start) on a
// kind declared twice or a declaration without its wire code.
func register[C Command](s kindSpec[C]) {
	var zero C
	switch {
	case s.fields != nil && (s.encode != nil || s.decode != nil):
		panic(fmt.Sprintf("ledger: command kind %d (%T) declares both fields and encode/decode", s.kind, zero))
	case s.fields != nil:
		fields := s.fields
		s.encode = func(w *writer, c C) error {
			fields(codec{w: w}, c)
			return w.err
		}
		s.decode = func(r *reader) C { return fields(codec{r: r}, zero) }
	}
	switch {
	case s.kind == 0 || s.name == "" || s.encode == nil || s.decode == nil || s.who == "":
		panic(fmt.Sprintf("ledger: incomplete declaration of command kind %d (%T)", s.kind, zero))
	case zero.kind() != s.kind:
		panic(fmt.Sprintf("ledger: %T declares kind %d but reports %d", zero, s.kind, zero.kind()))
	case kinds[s.kind] != nil:
		panic(fmt.Sprintf("ledger: command kind %d declared twice (%s, %T)", s.kind, kinds[s.kind].name, zero))
	}
	e := &kindEntry{
		kind: s.kind, name: s.name, since: max(s.since, minVersion), who: s.who,
		encode:       func(w *writer, c Command) error { return s.encode(w, c.(C)) },
		decode:       func(r *reader) Command { return s.decode(r) },
		version:      erase(s.version),
		sessionNow:   erase(s.sessionNow),
		sessionShard: erase(s.sessionShard),
		format:       erase(s.format),
	}
	if s.apply != nil {
		e.apply = func(f *FSM, index uint64, c Command) Result { return s.apply(f, index, c.(C)) }
	}
	if s.authorize != nil {
		e.authorize = func(a authz, c Command) error { return s.authorize(a, c.(C)) }
	}
	if s.digest != nil {
		e.digest = func(w *writer, c Command) { s.digest(w, c.(C)) }
	}
	if s.touches != nil {
		e.touches = func(c Command) ([]string, []uint32) { return s.touches(c.(C)) }
	}
	kinds[s.kind] = e
}

// erase turns a function of one command type into one of any Command
// (nil stays nil).
func erase[C Command, R any](fn func(C) R) func(Command) R {
	if fn == nil {
		return nil
	}
	return func(c Command) R { return fn(c.(C)) }
}

// specOf returns the declaration of c's kind, or nil for a nil command.
func specOf(c Command) *kindEntry {
	if c == nil {
		return nil
	}
	return kinds[c.kind()]
}

// Kinds returns every declared command kind, in wire-code order.
func Kinds() []Kind {
	var out []Kind
	for _, e := range kinds {
		if e != nil {
			out = append(out, e.kind)
		}
	}
	return out
}

// String names the kind.
func (k Kind) String() string {
	if e := kinds[k]; e != nil {
		return e.name
	}
	return "Kind(" + itoa(uint64(k)) + ")"
}

// versionFor is the oldest encoding version that can express c.
func versionFor(c Command) byte {
	e := specOf(c)
	switch {
	case e == nil:
		return minVersion
	case e.version == nil:
		return e.since
	}
	return max(e.since, e.version(c))
}

// commandNow is the proposer clock a Session wrapping c is remembered
// with (0 for none).
func commandNow(c Command) int64 {
	if e := specOf(c); e != nil && e.sessionNow != nil {
		return e.sessionNow(c)
	}
	return 0
}

// commandShard is the shard a Session wrapping c is remembered with (0
// for none).
func commandShard(c Command) uint32 {
	if e := specOf(c); e != nil && e.sessionShard != nil {
		return e.sessionShard(c)
	}
	return 0
}

// RequestDigest is the digest of what a request id stands for: the body of
// a JobEnqueue or App (what clients send), without the proposer's clock
// (Now), App's fencing epoch (a retry may carry a newer token) and
// JobEnqueue.MaxPending (the proposing node's setting, not the client's
// request); two tries of one request have the same digest whichever node
// proposes them. Other commands have the zero digest: only their kind and
// shard are compared, as before version 5.
func RequestDigest(c Command) Digest {
	e := specOf(c)
	if e == nil || e.digest == nil {
		return Digest{}
	}
	w := &writer{}
	w.u(uint64(e.kind))
	e.digest(w, c)
	sum := sha256.Sum256(w.b)
	var d Digest
	copy(d[:], sum[:])
	return d
}

// Touched returns the node ids and shards whose records a command can
// change, so a shell that feeds an agent entry by entry (the simulator)
// observes only those. Other commands touch no record an agent reads.
func Touched(c Command) (nodes []string, shards []uint32) {
	if e := specOf(c); e != nil && e.touches != nil {
		return e.touches(c)
	}
	return nil, nil
}

// FormatCommand renders a command in one short line, for logs, traces and
// test scripts.
func FormatCommand(c Command) string {
	if e := specOf(c); e != nil && e.format != nil {
		return e.format(c)
	}
	return fmt.Sprintf("%T", c)
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
