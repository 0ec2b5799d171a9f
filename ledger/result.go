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
	w := &writer{ver: resultVersion}
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
	cd := codec{w: w}
	shardFields(cd, r.Shard)
	nodeFields(cd, r.Node)
	jobFields(cd, r.Job)
	w.bool(r.Duplicate)
	w.bytes(r.Response)
	w.u(uint64(len(r.Results)))
	for _, sr := range r.Results {
		if err := encodeResult(w, sr, depth+1); err != nil {
			return err
		}
	}
	electionFields(cd, r.Election)
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
	cd := codec{r: rd}
	r.Shard = shardFields(cd, ShardRecord{})
	r.Node = nodeFields(cd, NodeRecord{})
	r.Job = jobFields(cd, JobRecord{})
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
		r.Election = electionFields(cd, ElectionRecord{})
	}
	return r
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// shardFields, nodeFields and jobFields declare the records' wire layout
// once, walked to encode and to decode results and snapshots (see codec).
func shardFields(cd codec, s ShardRecord) ShardRecord {
	cd.walk(&s.Shard, &s.Epoch, &s.Owner, &s.OwnerIncarnation, &s.OwnerLiveness, &s.State, &s.Target,
		&s.ChangedAt, &s.Reason)
	if cd.has(2) {
		cd.walk(&s.AvoidOwner)
	}
	return s
}

func nodeFields(cd codec, n NodeRecord) NodeRecord {
	cd.walk(&n.ID, &n.Incarnation, &n.Liveness, &n.Seq, &n.HeartbeatAt, &n.Draining)
	if cd.has(3) { // snapshots from version 3 (results never carry these)
		cd.walk(&n.MinVersion, &n.MaxVersion)
	}
	return n
}

func jobFields(cd codec, j JobRecord) JobRecord {
	cd.walk(&j.ID, &j.Shard, &j.Key, &j.Type, &j.Payload, &j.State, &j.Attempt, &j.MaxAttempts, &j.Owner,
		&j.Epoch, &j.StartedAt, &j.Timeout, &j.NotBefore, &j.EnqueuedAt, &j.FinishedAt, &j.LastError,
		&j.Result)
	return j
}
