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

// versionFor is the oldest encoding version that can express c.
func versionFor(c Command) byte {
	switch c := c.(type) {
	case Release:
		if c.Avoid {
			return 2
		}
	case DeclareElection:
		return 2
	case Heartbeat:
		if c.MinVersion != 0 || c.MaxVersion != 0 {
			return 3
		}
	case ClusterConfig:
		return 3
	case Session:
		return max(4, versionFor(c.Command))
	case PinShard, ExcludeNode, ClaimIncarnation:
		return 5
	case ForgetNode:
		return 6
	case JobEnqueue:
		if c.MaxPending != 0 {
			return encodingJobsAPI
		}
	case SetTakeoverPolicy:
		return encodingFencedTakeover
	case LogSettings:
		return encodingLogSettings
	case RevokeNode:
		return encodingRevocation
	case Batch:
		v := minVersion
		for _, sc := range c.Commands {
			if _, nested := sc.(Batch); !nested {
				v = max(v, versionFor(sc))
			}
		}
		return v
	}
	return minVersion
}

// Encoding limits. Decode rejects anything larger with ErrTooLarge.
const (
	MaxCommandSize  = 16 << 20 // a whole encoded command, batch included
	MaxStringLen    = 4096     // any string field (node ids, keys, reasons, errors)
	MaxBatchEntries = 1 << 14  // commands in one Batch
)

type writer struct {
	b   []byte
	ver byte // the version being written (fields added later are skipped below it)
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
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(fmt.Errorf("%w: bad uvarint", ErrMalformed))
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u32() uint32 {
	v := r.u()
	if v > 1<<32-1 {
		r.fail(fmt.Errorf("%w: value %d overflows uint32", ErrMalformed, v))
		return 0
	}
	return uint32(v)
}

func (r *reader) u8() uint8 {
	v := r.u()
	if v > 255 {
		r.fail(fmt.Errorf("%w: value %d overflows uint8", ErrMalformed, v))
		return 0
	}
	return uint8(v)
}

func (r *reader) i() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(fmt.Errorf("%w: bad varint", ErrMalformed))
		return 0
	}
	r.b = r.b[n:]
	return v
}

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
	if err := encodeBody(w, c, false); err != nil {
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

func checkStrs(kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := checkStr(kv[i], kv[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func encodeBody(w *writer, c Command, inBatch bool) error {
	if c == nil {
		return fmt.Errorf("%w: nil command", ErrInvalid)
	}
	switch c := c.(type) {
	case Heartbeat:
		if err := checkStrs("node", c.Node); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindHeartbeat))
		w.str(c.Node)
		w.u(c.Incarnation)
		w.u(c.Liveness)
		w.i(c.Now)
		if w.ver >= 3 {
			w.u(uint64(c.MinVersion))
			w.u(uint64(c.MaxVersion))
		}
	case ExpireNode:
		if err := checkStrs("node", c.Node); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindExpireNode))
		w.str(c.Node)
		w.u(c.Incarnation)
		w.u(c.Liveness)
		w.u(c.Seq)
		w.i(c.Now)
	case SetDraining:
		if err := checkStrs("node", c.Node); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindSetDraining))
		w.str(c.Node)
		w.u(c.Incarnation)
		w.bool(c.Draining)
		w.i(c.Now)
	case Grant:
		if err := checkStrs("owner", c.Owner, "reason", c.Reason); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindGrant))
		w.u(uint64(c.Shard))
		w.u(c.ExpectedEpoch)
		w.str(c.Owner)
		w.u(c.OwnerIncarnation)
		w.u(c.OwnerLiveness)
		w.bool(c.Takeover)
		w.i(c.Now)
		w.str(c.Reason)
	case Revoke:
		if err := checkStrs("target", c.Target, "reason", c.Reason); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindRevoke))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.str(c.Target)
		w.i(c.Now)
		w.str(c.Reason)
	case Release:
		if err := checkStrs("owner", c.Owner); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindRelease))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.str(c.Owner)
		w.i(c.Now)
		if w.ver >= 2 {
			w.bool(c.Avoid)
		}
	case Transfer:
		if err := checkStrs("from", c.From, "to", c.To, "reason", c.Reason); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindTransfer))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.str(c.From)
		w.str(c.To)
		w.u(c.ToIncarnation)
		w.u(c.ToLiveness)
		w.i(c.Now)
		w.str(c.Reason)
	case JobEnqueue:
		if err := checkStrs("key", c.Key, "type", c.Type); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindJobEnqueue))
		w.u(uint64(c.Shard))
		w.str(c.Key)
		w.str(c.Type)
		w.bytes(c.Payload)
		w.u(uint64(c.MaxAttempts))
		w.i(c.Now)
		if w.ver >= encodingJobsAPI {
			w.u(uint64(c.MaxPending))
		}
	case JobStart:
		if err := checkStrs("owner", c.Owner); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindJobStart))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.str(c.Owner)
		w.u(c.Job)
		w.u(uint64(c.Attempt))
		w.i(c.Timeout)
		w.i(c.Now)
	case JobComplete:
		w.b = append(w.b, byte(KindJobComplete))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.u(c.Job)
		w.u(uint64(c.Attempt))
		w.bytes(c.Result)
		w.i(c.Now)
	case JobFail:
		if err := checkStrs("error", c.Error); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindJobFail))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.u(c.Job)
		w.u(uint64(c.Attempt))
		w.str(c.Error)
		w.i(c.Backoff)
		w.i(c.Now)
	case App:
		if err := checkStrs("type", c.Type); err != nil {
			return err
		}
		w.b = append(w.b, byte(KindApp))
		w.u(uint64(c.Shard))
		w.u(c.Epoch)
		w.str(c.Type)
		w.bytes(c.Payload)
		w.i(c.Now)
	case Settings:
		w.b = append(w.b, byte(KindSettings))
		w.i(c.JobRetention)
		w.u(uint64(c.MaxFinishedJobs))
		w.u(uint64(c.DefaultMaxAttempts))
		w.i(c.Now)
	case LogSettings:
		return encodeLogSettings(w, c)
	case RevokeNode:
		return encodeRevokeNode(w, c)
	case ClusterConfig:
		if err := checkStrs("name", c.Name); err != nil {
			return err
		}
		if w.ver < 3 {
			return fmt.Errorf("%w: ClusterConfig needs encoding version 3", ErrInvalid)
		}
		w.b = append(w.b, byte(KindClusterConfig))
		w.str(c.Name)
		w.u(uint64(c.Partitions))
		w.u(uint64(c.Version))
		w.i(c.Now)
	case Session:
		switch c.Command.(type) {
		case nil, Batch, Session:
			return fmt.Errorf("%w: a session wraps one command, not %T", ErrInvalid, c.Command)
		}
		if c.ID.IsZero() {
			return fmt.Errorf("%w: session with the zero request id", ErrInvalid)
		}
		if w.ver < 4 {
			return fmt.Errorf("%w: Session needs encoding version 4", ErrInvalid)
		}
		w.b = append(w.b, byte(KindSession))
		w.b = append(w.b, c.ID[:]...)
		return encodeBody(w, c.Command, true)
	case PinShard:
		if err := checkStrs("node", c.Node, "reason", c.Reason); err != nil {
			return err
		}
		if w.ver < 5 {
			return fmt.Errorf("%w: PinShard needs encoding version 5", ErrInvalid)
		}
		w.b = append(w.b, byte(KindPinShard))
		w.u(uint64(c.Shard))
		w.str(c.Node)
		w.str(c.Reason)
		w.i(c.Now)
	case ExcludeNode:
		if err := checkStrs("node", c.Node, "reason", c.Reason); err != nil {
			return err
		}
		if w.ver < 5 {
			return fmt.Errorf("%w: ExcludeNode needs encoding version 5", ErrInvalid)
		}
		w.b = append(w.b, byte(KindExcludeNode))
		w.str(c.Node)
		w.bool(c.Exclude)
		w.str(c.Reason)
		w.i(c.Now)
	case ForgetNode:
		if err := checkStrs("node", c.Node); err != nil {
			return err
		}
		if w.ver < 6 {
			return fmt.Errorf("%w: ForgetNode needs encoding version 6", ErrInvalid)
		}
		w.b = append(w.b, byte(KindForgetNode))
		w.str(c.Node)
		w.u(c.Incarnation)
		w.u(c.Liveness)
		w.u(c.Seq)
		w.i(c.Now)
	case ClaimIncarnation:
		if err := checkStrs("node", c.Node); err != nil {
			return err
		}
		if w.ver < 5 {
			return fmt.Errorf("%w: ClaimIncarnation needs encoding version 5", ErrInvalid)
		}
		w.b = append(w.b, byte(KindClaimIncarnation))
		w.str(c.Node)
		w.i(c.Now)
		w.u(uint64(c.MinVersion))
		w.u(uint64(c.MaxVersion))
	case SetTakeoverPolicy:
		return encodeTakeoverPolicy(w, c)
	case DeclareElection:
		if err := checkStrs("group", c.Group, "name", c.Name); err != nil {
			return err
		}
		if w.ver < 2 {
			return fmt.Errorf("%w: DeclareElection needs encoding version 2", ErrInvalid)
		}
		w.b = append(w.b, byte(KindDeclareElection))
		w.str(c.Group)
		w.str(c.Name)
		w.u(uint64(c.Partitions))
		w.i(c.Now)
	case Batch:
		if inBatch {
			return fmt.Errorf("%w: nested batch", ErrInvalid)
		}
		if len(c.Commands) > MaxBatchEntries {
			return fmt.Errorf("%w: batch of %d commands exceeds %d", ErrTooLarge, len(c.Commands), MaxBatchEntries)
		}
		w.b = append(w.b, byte(KindBatch))
		w.u(uint64(len(c.Commands)))
		sub := &writer{ver: w.ver}
		for _, sc := range c.Commands {
			sub.b = sub.b[:0]
			if err := encodeBody(sub, sc, true); err != nil {
				return err
			}
			w.bytes(sub.b)
		}
	default:
		return fmt.Errorf("%w: unknown command type %T", ErrInvalid, c)
	}
	return nil
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
	c := decodeBody(r, false)
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.b))
	}
	return c, nil
}

func decodeBody(r *reader, inBatch bool) Command {
	if len(r.b) < 1 {
		r.fail(fmt.Errorf("%w: missing kind", ErrMalformed))
		return nil
	}
	k := Kind(r.b[0])
	r.b = r.b[1:]
	switch k {
	case KindHeartbeat:
		c := Heartbeat{Node: r.str(), Incarnation: r.u(), Liveness: r.u(), Now: r.i()}
		if r.ver >= 3 {
			c.MinVersion, c.MaxVersion = r.u32(), r.u32()
		}
		return c
	case KindExpireNode:
		return ExpireNode{Node: r.str(), Incarnation: r.u(), Liveness: r.u(), Seq: r.u(), Now: r.i()}
	case KindSetDraining:
		return SetDraining{Node: r.str(), Incarnation: r.u(), Draining: r.bool(), Now: r.i()}
	case KindGrant:
		return Grant{Shard: r.u32(), ExpectedEpoch: r.u(), Owner: r.str(), OwnerIncarnation: r.u(),
			OwnerLiveness: r.u(), Takeover: r.bool(), Now: r.i(), Reason: r.str()}
	case KindRevoke:
		return Revoke{Shard: r.u32(), Epoch: r.u(), Target: r.str(), Now: r.i(), Reason: r.str()}
	case KindRelease:
		c := Release{Shard: r.u32(), Epoch: r.u(), Owner: r.str(), Now: r.i()}
		if r.ver >= 2 {
			c.Avoid = r.bool()
		}
		return c
	case KindTransfer:
		return Transfer{Shard: r.u32(), Epoch: r.u(), From: r.str(), To: r.str(), ToIncarnation: r.u(),
			ToLiveness: r.u(), Now: r.i(), Reason: r.str()}
	case KindJobEnqueue:
		c := JobEnqueue{Shard: r.u32(), Key: r.str(), Type: r.str(), Payload: r.bytes(),
			MaxAttempts: r.u32(), Now: r.i()}
		if r.ver >= encodingJobsAPI {
			c.MaxPending = r.u32()
		}
		return c
	case KindJobStart:
		return JobStart{Shard: r.u32(), Epoch: r.u(), Owner: r.str(), Job: r.u(), Attempt: r.u32(),
			Timeout: r.i(), Now: r.i()}
	case KindJobComplete:
		return JobComplete{Shard: r.u32(), Epoch: r.u(), Job: r.u(), Attempt: r.u32(), Result: r.bytes(), Now: r.i()}
	case KindJobFail:
		return JobFail{Shard: r.u32(), Epoch: r.u(), Job: r.u(), Attempt: r.u32(), Error: r.str(),
			Backoff: r.i(), Now: r.i()}
	case KindApp:
		return App{Shard: r.u32(), Epoch: r.u(), Type: r.str(), Payload: r.bytes(), Now: r.i()}
	case KindSettings:
		return Settings{JobRetention: r.i(), MaxFinishedJobs: r.u32(), DefaultMaxAttempts: r.u32(), Now: r.i()}
	case KindLogSettings:
		return decodeLogSettings(r)
	case KindRevokeNode:
		return decodeRevokeNode(r)
	case KindDeclareElection:
		if r.ver < 2 {
			r.fail(fmt.Errorf("%w: DeclareElection in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		return DeclareElection{Group: r.str(), Name: r.str(), Partitions: r.u32(), Now: r.i()}
	case KindPinShard:
		if r.ver < 5 {
			r.fail(fmt.Errorf("%w: PinShard in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		return PinShard{Shard: r.u32(), Node: r.str(), Reason: r.str(), Now: r.i()}
	case KindExcludeNode:
		if r.ver < 5 {
			r.fail(fmt.Errorf("%w: ExcludeNode in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		return ExcludeNode{Node: r.str(), Exclude: r.bool(), Reason: r.str(), Now: r.i()}
	case KindClusterConfig:
		if r.ver < 3 {
			r.fail(fmt.Errorf("%w: ClusterConfig in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		return ClusterConfig{Name: r.str(), Partitions: r.u32(), Version: r.u32(), Now: r.i()}
	case KindForgetNode:
		if r.ver < 6 {
			r.fail(fmt.Errorf("%w: ForgetNode in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		return ForgetNode{Node: r.str(), Incarnation: r.u(), Liveness: r.u(), Seq: r.u(), Now: r.i()}
	case KindClaimIncarnation:
		if r.ver < 5 {
			r.fail(fmt.Errorf("%w: ClaimIncarnation in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		return ClaimIncarnation{Node: r.str(), Now: r.i(), MinVersion: r.u32(), MaxVersion: r.u32()}
	case KindSetTakeoverPolicy:
		return decodeTakeoverPolicy(r)
	case KindSession:
		if r.ver < 4 {
			r.fail(fmt.Errorf("%w: Session in a version %d entry", ErrMalformed, r.ver))
			return nil
		}
		id := r.requestID()
		switch {
		case r.err != nil:
			return nil
		case id.IsZero():
			r.fail(fmt.Errorf("%w: session with the zero request id", ErrMalformed))
			return nil
		case len(r.b) > 0 && Kind(r.b[0]) == KindSession:
			r.fail(fmt.Errorf("%w: nested session", ErrMalformed))
			return nil
		}
		c := decodeBody(r, true) // inBatch: a session does not wrap a batch
		if r.err != nil {
			return nil
		}
		return Session{ID: id, Command: c}
	case KindBatch:
		if inBatch {
			r.fail(fmt.Errorf("%w: nested batch", ErrMalformed))
			return nil
		}
		n := r.u()
		if r.err != nil {
			return nil
		}
		if n > MaxBatchEntries {
			r.fail(fmt.Errorf("%w: batch of %d commands exceeds %d", ErrTooLarge, n, MaxBatchEntries))
			return nil
		}
		if n > uint64(len(r.b)) { // every entry takes at least one byte
			r.fail(fmt.Errorf("%w: batch of %d commands in %d bytes", ErrMalformed, n, len(r.b)))
			return nil
		}
		cmds := make([]Command, 0, n)
		for range n {
			sub := &reader{b: r.raw(MaxCommandSize), ver: r.ver}
			if r.err != nil {
				return nil
			}
			c := decodeBody(sub, true)
			if sub.err != nil {
				r.fail(sub.err)
				return nil
			}
			if len(sub.b) != 0 {
				r.fail(fmt.Errorf("%w: %d trailing bytes in batch entry", ErrMalformed, len(sub.b)))
				return nil
			}
			cmds = append(cmds, c)
		}
		return Batch{Commands: cmds}
	}
	r.fail(fmt.Errorf("%w: unknown kind %d", ErrMalformed, k))
	return nil
}
