package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Sentinels an error of the client matches with errors.Is. Those of the
// classes the server shares (apitypes) are the same values as httpapi's.
var (
	// ErrBadRequest: 400, the request is invalid (its Code may say more:
	// "invalid").
	ErrBadRequest = errors.New("tenure: bad request")
	// ErrUnauthorized: 401, no token or a wrong one.
	ErrUnauthorized = errors.New("tenure: unauthorized")
	// ErrForbidden: 403, the read token where the write token is needed.
	ErrForbidden = apitypes.ErrForbidden
	// ErrNotFound: 404.
	ErrNotFound = apitypes.ErrNotFound
	// ErrConflict: 409 (a job in the wrong state, a stale token, nothing to
	// finalize).
	ErrConflict = apitypes.ErrConflict
	// ErrTooLarge: 413.
	ErrTooLarge = errors.New("tenure: request too large")
	// ErrQueueFull: 429, the job's shard holds its cap of pending jobs;
	// retry after APIError.RetryAfter.
	ErrQueueFull = apitypes.ErrQueueFull
	// ErrKeyReused: 422, the Idempotency-Key was used for another request
	// body within the server's session window. Nothing was enqueued.
	ErrKeyReused = apitypes.ErrKeyReused
	// ErrUnavailable: 503, the node has no quorum or is closing (retried
	// for idempotent calls), or is still joining.
	ErrUnavailable = apitypes.ErrUnavailable
	// ErrTimeout: 504, the node's operation ran out of time.
	ErrTimeout = errors.New("tenure: timed out")
	// ErrNotImplemented: 501, the node cannot do this (no keyring, no
	// cluster versions).
	ErrNotImplemented = errors.New("tenure: not implemented by this node")
	// ErrUnreachable: no answer (connection refused, reset, timed out).
	ErrUnreachable = errors.New("tenure: server unreachable")
	// ErrNotTenure: the server answered something that is not the tenure
	// API (HTML, another JSON shape).
	ErrNotTenure = errors.New("tenure: not a tenure API")
	// ErrNoOwner: Route found the key's shard without a valid owner, or an
	// owner that advertises no HTTP address; retry after about a lease.
	ErrNoOwner = errors.New("tenure: no owner to route to")
)

// APIError is an error answer of the API.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the API's machine-readable code when it gave one
	// ("unauthorized", "forbidden", "queue_full", "too_large", "invalid").
	Code string
	// Message is the API's explanation.
	Message string
	// RetryAfter is the Retry-After the server sent (429, 503), or zero.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("tenure API answered %d (%s): %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("tenure API answered %d: %s", e.Status, e.Message)
}

// statusOf is the HTTP status each plain sentinel stands for.
var statusOf = map[error]int{
	ErrBadRequest:     http.StatusBadRequest,
	ErrUnauthorized:   http.StatusUnauthorized,
	ErrForbidden:      http.StatusForbidden,
	ErrNotFound:       http.StatusNotFound,
	ErrConflict:       http.StatusConflict,
	ErrTooLarge:       http.StatusRequestEntityTooLarge,
	ErrUnavailable:    http.StatusServiceUnavailable,
	ErrTimeout:        http.StatusGatewayTimeout,
	ErrNotImplemented: http.StatusNotImplemented,
}

// Is matches the sentinel of e's status (and code).
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrQueueFull:
		return e.Status == apitypes.CodeStatus[apitypes.CodeQueueFull] || e.Code == apitypes.CodeQueueFull
	case ErrKeyReused:
		return e.Status == apitypes.CodeStatus[apitypes.CodeKeyReused] && e.Code == apitypes.CodeKeyReused
	}
	status, ok := statusOf[target]
	return ok && e.Status == status
}

func newAPIError(resp *http.Response, body []byte) error {
	e := &APIError{Status: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var eb apitypes.ErrorBody
	if isJSON(resp.Header.Get("Content-Type")) && json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		e.Code, e.Message = eb.Code, eb.Error
		return e
	}
	// Not the API's error body: another server (or a proxy) answered.
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	if resp.StatusCode == http.StatusNotFound || !isJSON(resp.Header.Get("Content-Type")) {
		return fmt.Errorf("%w (%w)", e, ErrNotTenure)
	}
	return e
}

// UnreachableError is a request that got no answer.
type UnreachableError struct {
	Addr string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("no answer from %s: %v", e.Addr, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is matches ErrUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }
