package ledger

import (
	"encoding/binary"
	"fmt"
)

// Wire format (docs/ledger.md): one version byte, one kind byte, then the
// command's fields in declaration order (fields added by a later version
// are read only from entries of that version): unsigned integers as uvarints,
// signed as zigzag varints, bools as one byte 0/1, strings and byte slices as
// a uvarint length then the bytes. A Batch is a uvarint count followed by
// each command as a uvarint length and its encoding without the version byte.
// Decode checks every length against the remaining bytes and the limits
// below, rejects trailing bytes, and never panics.

// Version is the newest encoding version, written as the first byte.
// Version 2 added Release.Avoid and DeclareElection; version 3
// Heartbeat.MinVersion/MaxVersion and ClusterConfig; version 4 Session (a
// command with a request id); version 5 PinShard, ExcludeNode and
// ClaimIncarnation; version 6 SetTakeoverPolicy, LogSettings and ForgetNode. Encode
// writes the oldest version that can express the command (version 1 for
// everything else), so nodes of the previous release keep reading it;
// Version 7 (cluster version 5) JobEnqueue.MaxPending.
// Decode reads versions 1 to 7.
const Version byte = 7

// minVersion is the oldest version Decode reads.
const minVersion byte = 1

// Encoding limits. Decode rejects anything larger with ErrTooLarge.
const (
	MaxCommandSize  = 16 << 20 // a whole encoded command, batch included
	MaxStringLen    = 4096     // any string field (node ids, keys, reasons, errors)
	MaxBatchEntries = 1 << 14  // commands in one Batch
)

type writer struct {
	b   []byte
	ver byte // the version being written (fields added later are skipped below it)
	// nested is set inside a Batch or Session (which do not nest).
	nested bool
	// err is the first field that failed its limit (codec.str).
	err error
}

func (w *writer) u(v uint64)     { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) i(v int64)      { w.b = binary.AppendVarint(w.b, v) }
func (w *writer) bytes(p []byte) { w.u(uint64(len(p))); w.b = append(w.b, p...) }
func (w *writer) str(s string)   { w.u(uint64(len(s))); w.b = append(w.b, s...) }
func (w *writer) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

// reader decodes with a sticky error: after the first failure every read
// returns a zero value and err keeps the first cause.
type reader struct {
	b   []byte
	err error
	// ver is the version of the command, result or snapshot being read
	// (each gained fields in its version 2).
	ver byte
	// nested is set inside a Batch or Session (which do not nest).
	nested bool
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// varint reads one varint with read (binary.Uvarint or binary.Varint,
// named what in the error).
func varint[T uint64 | int64](r *reader, read func([]byte) (T, int), what string) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.fail(fmt.Errorf("%w: bad %s", ErrMalformed, what))
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u() uint64 { return varint(r, binary.Uvarint, "uvarint") }

// bounded reads a uvarint no larger than limit (the max of the Go type
// named what).
func (r *reader) bounded(limit uint64, what string) uint64 {
	v := r.u()
	if v > limit {
		r.fail(fmt.Errorf("%w: value %d overflows %s", ErrMalformed, v, what))
		return 0
	}
	return v
}

func (r *reader) u32() uint32 { return uint32(r.bounded(1<<32-1, "uint32")) }

func (r *reader) u8() uint8 { return uint8(r.bounded(255, "uint8")) }

func (r *reader) i() int64 { return varint(r, binary.Varint, "varint") }

func (r *reader) bool() bool {
	if r.err != nil {
		return false
	}
	if len(r.b) < 1 {
		r.fail(fmt.Errorf("%w: truncated bool", ErrMalformed))
		return false
	}
	v := r.b[0]
	r.b = r.b[1:]
	if v > 1 {
		r.fail(fmt.Errorf("%w: bool byte %d", ErrMalformed, v))
		return false
	}
	return v == 1
}

func (r *reader) raw(max uint64) []byte {
	n := r.u()
	if r.err != nil {
		return nil
	}
	if n > max {
		r.fail(fmt.Errorf("%w: field of %d bytes exceeds %d", ErrTooLarge, n, max))
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(fmt.Errorf("%w: field of %d bytes, %d left", ErrMalformed, n, len(r.b)))
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) str() string { return string(r.raw(MaxStringLen)) }

// bytes returns a copy (nil for empty) so decoded commands never alias the input.
func (r *reader) bytes() []byte {
	p := r.raw(MaxCommandSize)
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

// Encode returns the wire form of c. It fails for unknown command types,
// nested batches and commands larger than the limits.
func Encode(c Command) ([]byte, error) {
	w := &writer{b: make([]byte, 0, 64), ver: versionFor(c)}
	w.b = append(w.b, w.ver)
	if err := encodeBody(w, c); err != nil {
		return nil, err
	}
	if len(w.b) > MaxCommandSize {
		return nil, fmt.Errorf("%w: command of %d bytes exceeds %d", ErrTooLarge, len(w.b), MaxCommandSize)
	}
	return w.b, nil
}

// MustEncode is Encode for commands known to be valid (tests, literals); it
// panics on error.
func MustEncode(c Command) []byte {
	b, err := Encode(c)
	if err != nil {
		panic(err)
	}
	return b
}

func checkStr(field, s string) error {
	if len(s) > MaxStringLen {
		return fmt.Errorf("%w: %s of %d bytes exceeds %d", ErrTooLarge, field, len(s), MaxStringLen)
	}
	return nil
}

// encodeBody writes c's kind byte and fields (its declaration's encode).
func encodeBody(w *writer, c Command) error {
	if c == nil {
		return fmt.Errorf("%w: nil command", ErrInvalid)
	}
	e := specOf(c)
	if e == nil {
		return fmt.Errorf("%w: unknown command type %T", ErrInvalid, c)
	}
	if w.ver < e.since {
		return fmt.Errorf("%w: %s needs encoding version %d", ErrInvalid, e.name, e.since)
	}
	w.b = append(w.b, byte(e.kind))
	return e.encode(w, c)
}

// Decode parses a command produced by Encode. It never panics; malformed
// input gives ErrMalformed, oversized input ErrTooLarge, an unknown version
// ErrVersion.
func Decode(b []byte) (Command, error) {
	if len(b) > MaxCommandSize {
		return nil, fmt.Errorf("%w: command of %d bytes exceeds %d", ErrTooLarge, len(b), MaxCommandSize)
	}
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if b[0] < minVersion || b[0] > Version {
		return nil, fmt.Errorf("%w: %d (this build reads %d to %d)", ErrVersion, b[0], minVersion, Version)
	}
	r := &reader{b: b[1:], ver: b[0]}
	c := decodeBody(r)
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.b))
	}
	return c, nil
}

// decodeBody reads a kind byte and that kind's fields (its declaration's
// decode).
func decodeBody(r *reader) Command {
	if len(r.b) < 1 {
		r.fail(fmt.Errorf("%w: missing kind", ErrMalformed))
		return nil
	}
	k := Kind(r.b[0])
	r.b = r.b[1:]
	e := kinds[k]
	if e == nil {
		r.fail(fmt.Errorf("%w: unknown kind %d", ErrMalformed, k))
		return nil
	}
	if r.ver < e.since {
		r.fail(fmt.Errorf("%w: %s in a version %d entry", ErrMalformed, e.name, r.ver))
		return nil
	}
	return e.decode(r)
}

// EncodeEntry encodes c (not a Batch) as one command of a log entry: its
// kind and fields without the version byte, at encoding version ver or the
// oldest that can express c, whichever is newer; it returns the version
// used. A group-commit batcher encodes each command once with ver 0, then
// re-encodes the few that need the entry's newer version, and frames them
// with JoinEntry.
func EncodeEntry(c Command, ver byte) (body []byte, used byte, err error) {
	w := &writer{ver: max(ver, versionFor(c)), nested: true}
	if err := encodeBody(w, c); err != nil {
		return nil, 0, err
	}
	return w.b, w.ver, nil
}

// JoinEntry frames command bodies from EncodeEntry, all at version ver,
// as one log entry: the command itself when there is one, else a Batch of
// them in order.
func JoinEntry(ver byte, bodies [][]byte) []byte {
	n := 16
	for _, b := range bodies {
		n += len(b) + 4
	}
	w := &writer{b: make([]byte, 0, n)}
	w.b = append(w.b, ver)
	if len(bodies) == 1 {
		w.b = append(w.b, bodies[0]...)
		return w.b
	}
	w.b = append(w.b, byte(KindBatch))
	w.u(uint64(len(bodies)))
	for _, b := range bodies {
		w.bytes(b)
	}
	return w.b
}
