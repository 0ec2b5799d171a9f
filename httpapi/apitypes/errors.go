package apitypes

import "errors"

// The error classes both sides of the API share: package httpapi's Backend
// errors wrap them and the server answers each with its status (and code:
// CodeQueueFull, CodeKeyReused, CodeForbidden), and package client's errors
// of those statuses match them with errors.Is. httpapi and client re-export
// them under their own names (httpapi.ErrNotFound and client.ErrNotFound are
// this ErrNotFound; httpapi.ErrRequestIDReused and client.ErrKeyReused are
// ErrKeyReused).
var (
	// ErrNotFound: 404.
	ErrNotFound = errors.New("tenure: not found")
	// ErrConflict: 409 (a job in the wrong state, a stale token, nothing to
	// finalize, a cluster version that does not allow it yet).
	ErrConflict = errors.New("tenure: conflict")
	// ErrForbidden: 403 (the read token where the write token is needed, or
	// the control group refused the command for the node's certificate).
	ErrForbidden = errors.New("tenure: forbidden")
	// ErrQueueFull: 429, the job's shard holds its cap of pending jobs.
	ErrQueueFull = errors.New("tenure: too many pending jobs")
	// ErrKeyReused: 422, the Idempotency-Key was used for another request
	// body within the session window. Nothing was enqueued.
	ErrKeyReused = errors.New("tenure: idempotency key reused with another request")
	// ErrUnavailable: 503, the node has no quorum, is closing or is still
	// joining.
	ErrUnavailable = errors.New("tenure: unavailable")
)
