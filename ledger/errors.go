package ledger

import (
	"errors"
	"fmt"
)

// Sentinel errors. Results carry them (possibly wrapped with details); use
// errors.Is. They survive Result.MarshalBinary/UnmarshalBinary, so a result
// forwarded over RPC still matches the same sentinel.
var (
	// ErrStaleEpoch: the command's epoch is not the shard's current epoch.
	ErrStaleEpoch = errors.New("ledger: stale epoch")
	// ErrNotOwner: the proposer is not the shard's valid owner, or the
	// shard is not in a state that lets the owner do this.
	ErrNotOwner = errors.New("ledger: not the owner")
	// ErrShardOwned: a Grant on a shard whose ownership is still valid.
	ErrShardOwned = errors.New("ledger: shard is owned")
	// ErrStaleLiveness: the node's liveness epoch moved on (it was expired).
	ErrStaleLiveness = errors.New("ledger: stale liveness epoch")
	// ErrStaleIncarnation: a newer incarnation of the node is registered.
	ErrStaleIncarnation = errors.New("ledger: stale incarnation")
	// ErrConflict: a compare-and-set lost (state changed since it was read).
	ErrConflict = errors.New("ledger: conflict")
	// ErrUnknownNode: no NodeRecord for the node.
	ErrUnknownNode = errors.New("ledger: unknown node")
	// ErrWrongAttempt: a job transition for an attempt that is not current.
	ErrWrongAttempt = errors.New("ledger: wrong attempt")
	// ErrUnknownJob: no such job (never enqueued, or dropped by retention).
	ErrUnknownJob = errors.New("ledger: unknown job")
	// ErrJobState: the job is not in a state that allows the transition
	// (e.g. complete a pending job, start a job before its backoff ends).
	ErrJobState = errors.New("ledger: job state does not allow this")
	// ErrJobFinished: the job already completed or was dead-lettered.
	ErrJobFinished = errors.New("ledger: job finished")
	// ErrUnknownType: no application state machine registered for the type.
	ErrUnknownType = errors.New("ledger: unknown application type")
	// ErrTooLarge: a command, payload or field exceeds a size limit.
	ErrTooLarge = errors.New("ledger: too large")
	// ErrMalformed: bytes that do not decode to a valid command or record.
	ErrMalformed = errors.New("ledger: malformed")
	// ErrHalted: this replica met a committed entry it cannot read and
	// stopped applying (FSM.HaltedAt); it needs a binary that reads it.
	ErrHalted = errors.New("ledger: replica halted on an entry it cannot read")
	// ErrVersion: an encoding version this build does not understand.
	ErrVersion = errors.New("ledger: unsupported encoding version")
	// ErrInvalid: a command with a field value Apply does not accept.
	ErrInvalid = errors.New("ledger: invalid command")
	// ErrApplication: an application state machine returned an error; the
	// wrapped *AppError carries its message.
	ErrApplication = errors.New("ledger: application error")
	// ErrStoreLocked: the data dir is held by another process.
	ErrStoreLocked = errors.New("ledger: data dir locked")
	// ErrStoreCorrupt: the data dir's files cannot be read.
	ErrStoreCorrupt = errors.New("ledger: data dir corrupt")
	// ErrClosed: the Batcher or FSM waiter was closed.
	ErrClosed = errors.New("ledger: closed")
)

// errorCodes gives each sentinel a stable wire code (Result encoding).
// Code 0 is "no error"; codes are never reused.
var errorCodes = []struct {
	code uint64
	err  error
}{
	{1, ErrStaleEpoch}, {2, ErrNotOwner}, {3, ErrShardOwned}, {4, ErrStaleLiveness},
	{5, ErrStaleIncarnation}, {6, ErrConflict}, {7, ErrUnknownNode}, {8, ErrWrongAttempt},
	{9, ErrUnknownJob}, {10, ErrJobState}, {11, ErrJobFinished}, {12, ErrUnknownType},
	{13, ErrTooLarge}, {14, ErrMalformed}, {15, ErrVersion}, {16, ErrInvalid},
	{17, ErrApplication}, {18, ErrStoreLocked}, {19, ErrStoreCorrupt}, {20, ErrClosed},
	{26, ErrQueueFull}, {27, ErrRequestIDReused}, // cluster version 5 (jobsapi.go)
	{28, ErrRevoked}, // cluster version 5 (revoke.go)
}

// codeUnknown marks an error that matches no sentinel; it decodes to a plain
// error with the same message.
const codeUnknown = 255

func errorCode(err error) uint64 {
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return codeUnknown
}

func errorForCode(code uint64) error {
	for _, e := range errorCodes {
		if e.code == code {
			return e.err
		}
	}
	return nil
}

// AppError is the error an application state machine returned from Apply.
// It matches ErrApplication with errors.Is.
type AppError struct{ Msg string }

func (e *AppError) Error() string { return "ledger: application error: " + e.Msg }

// Unwrap returns ErrApplication.
func (e *AppError) Unwrap() error { return ErrApplication }

// wireError is an error decoded from a Result: same message, same sentinel.
type wireError struct {
	msg      string
	sentinel error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.sentinel }

// errf wraps a sentinel with details: errors.Is(errf(ErrX, ...), ErrX).
func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
