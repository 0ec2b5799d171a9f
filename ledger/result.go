package ledger

import (
	"errors"
	"fmt"
)

// Result is what applying one command produced. Apply never fails as a
// function: a rejected command is a Result with Err set (a sentinel, wrapped
// with details). The record fields are filled by the commands that touch
// them, also on most rejections (the current record, so a proposer can
// re-read without another round trip).
type Result struct {
	// Err is nil when the command was accepted.
	Err error
	// Index is the log index the command was applied at.
	Index uint64
	// Shard is the shard record after Grant/Revoke/Release/Transfer (or the
	// current record when rejected).
	Shard ShardRecord
	// Node is the node record after Heartbeat/ExpireNode/SetDraining (or
	// the current record when rejected).
	Node NodeRecord
	// Job is the job record after a job command.
	Job JobRecord
	// Duplicate is set when JobEnqueue found the idempotency key and
	// returned the existing job.
	Duplicate bool
	// Response is what the application state machine returned (App).
	Response []byte
	// Results holds one result per command of a Batch, in order.
	Results []Result
	// Election is the record DeclareElection declared or found (Duplicate
	// set when it existed).
	Election ElectionRecord
	// Replayed is set when a Session's request id was found in the session
	// table: the wrapped command was not applied again and the rest of the
	// Result is its first application's (the job's payload and result
	// re-read from the job, if it is still kept). Local only: not part of
	// the wire form, and Results of a Batch are not remembered.
	Replayed bool
}

// resultVersion 2 added ShardRecord.AvoidOwner and Result.Election;
// version 1 is still read.
const resultVersion byte = 2

// MarshalBinary encodes the result (for forwarding over RPC). Errors keep
// their sentinel: after UnmarshalBinary, errors.Is(r.Err, ErrX) holds
// exactly when it held before.
func (r Result) MarshalBinary() ([]byte, error) {
	w := &writer{}
	w.b = append(w.b, resultVersion)
	if err := encodeResult(w, r, 0); err != nil {
		return nil, err
	}
	return w.b, nil
}

func encodeResult(w *writer, r Result, depth int) error {
	if depth > 1 {
		return fmt.Errorf("%w: nested batch result", ErrInvalid)
	}
	if r.Err == nil {
		w.u(0)
	} else {
		w.u(errorCode(r.Err))
		msg := r.Err.Error()
		if len(msg) > MaxStringLen {
			msg = msg[:MaxStringLen]
		}
		w.str(msg)
	}
	w.u(r.Index)
	encodeShard(w, r.Shard)
	encodeNode(w, r.Node)
	encodeJob(w, r.Job)
	w.bool(r.Duplicate)
	w.bytes(r.Response)
	w.u(uint64(len(r.Results)))
	for _, sr := range r.Results {
		if err := encodeResult(w, sr, depth+1); err != nil {
			return err
		}
	}
	encodeElection(w, r.Election)
	return nil
}

// UnmarshalBinary decodes a result written by MarshalBinary. It never
// panics.
func (r *Result) UnmarshalBinary(b []byte) error {
	if len(b) < 1 {
		return fmt.Errorf("%w: empty result", ErrMalformed)
	}
	if b[0] != 1 && b[0] != resultVersion {
		return fmt.Errorf("%w: result version %d", ErrVersion, b[0])
	}
	rd := &reader{b: b[1:], ver: b[0]}
	out := decodeResult(rd, 0)
	if rd.err != nil {
		return rd.err
	}
	if len(rd.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(rd.b))
	}
	*r = out
	return nil
}

func decodeResult(rd *reader, depth int) Result {
	var r Result
	if code := rd.u(); code != 0 {
		msg := rd.str()
		var sentinel error
		if s := errorForCode(code); s != nil {
			sentinel = s
		}
		switch {
		case sentinel == nil:
			r.Err = errors.New(msg)
		case sentinel == ErrApplication:
			r.Err = &AppError{Msg: trimPrefix(msg, "ledger: application error: ")}
		default:
			r.Err = &wireError{msg: msg, sentinel: sentinel}
		}
	}
	r.Index = rd.u()
	r.Shard = decodeShard(rd)
	r.Node = decodeNode(rd)
	r.Job = decodeJob(rd)
	r.Duplicate = rd.bool()
	r.Response = rd.bytes()
	n := rd.u()
	if rd.err != nil {
		return Result{}
	}
	if n > 0 {
		if depth > 0 || n > MaxBatchEntries || n > uint64(len(rd.b)) {
			rd.fail(fmt.Errorf("%w: %d sub-results", ErrMalformed, n))
			return Result{}
		}
		r.Results = make([]Result, 0, n)
		for range n {
			r.Results = append(r.Results, decodeResult(rd, depth+1))
			if rd.err != nil {
				return Result{}
			}
		}
	}
	if rd.ver >= 2 {
		r.Election = decodeElection(rd)
	}
	return r
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func encodeShard(w *writer, s ShardRecord) {
	w.u(uint64(s.Shard))
	w.u(s.Epoch)
	w.str(s.Owner)
	w.u(s.OwnerIncarnation)
	w.u(s.OwnerLiveness)
	w.u(uint64(s.State))
	w.str(s.Target)
	w.i(s.ChangedAt)
	w.str(s.Reason)
	w.str(s.AvoidOwner)
}

func decodeShard(r *reader) ShardRecord {
	s := ShardRecord{Shard: r.u32(), Epoch: r.u(), Owner: r.str(), OwnerIncarnation: r.u(),
		OwnerLiveness: r.u(), State: ShardState(r.u8()), Target: r.str(), ChangedAt: r.i(), Reason: r.str()}
	if r.ver >= 2 {
		s.AvoidOwner = r.str()
	}
	return s
}

func encodeNode(w *writer, n NodeRecord) {
	w.str(n.ID)
	w.u(n.Incarnation)
	w.u(n.Liveness)
	w.u(n.Seq)
	w.i(n.HeartbeatAt)
	w.bool(n.Draining)
	if w.ver >= 3 { // snapshots from version 3 (results never carry these)
		w.u(uint64(n.MinVersion))
		w.u(uint64(n.MaxVersion))
	}
}

func decodeNode(r *reader) NodeRecord {
	n := NodeRecord{ID: r.str(), Incarnation: r.u(), Liveness: r.u(), Seq: r.u(), HeartbeatAt: r.i(), Draining: r.bool()}
	if r.ver >= 3 {
		n.MinVersion, n.MaxVersion = r.u32(), r.u32()
	}
	return n
}

func encodeJob(w *writer, j JobRecord) {
	w.u(j.ID)
	w.u(uint64(j.Shard))
	w.str(j.Key)
	w.str(j.Type)
	w.bytes(j.Payload)
	w.u(uint64(j.State))
	w.u(uint64(j.Attempt))
	w.u(uint64(j.MaxAttempts))
	w.str(j.Owner)
	w.u(j.Epoch)
	w.i(j.StartedAt)
	w.i(j.Timeout)
	w.i(j.NotBefore)
	w.i(j.EnqueuedAt)
	w.i(j.FinishedAt)
	w.str(j.LastError)
	w.bytes(j.Result)
}

func decodeJob(r *reader) JobRecord {
	return JobRecord{ID: r.u(), Shard: r.u32(), Key: r.str(), Type: r.str(), Payload: r.bytes(),
		State: JobState(r.u8()), Attempt: r.u32(), MaxAttempts: r.u32(), Owner: r.str(), Epoch: r.u(),
		StartedAt: r.i(), Timeout: r.i(), NotBefore: r.i(), EnqueuedAt: r.i(), FinishedAt: r.i(),
		LastError: r.str(), Result: r.bytes()}
}
