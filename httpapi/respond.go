// Request and response helpers every handler uses: bodies, errors, JSON,
// and list paging with cursors.

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// pageParams parses ?limit= (1..max, def when absent) and ?after= (a
// cursor: the last item of the previous page). It writes the 400 itself.
func pageParams(w http.ResponseWriter, r *http.Request, def, max int) (limit int, after string, ok bool) {
	q := r.URL.Query()
	limit = def
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1..%d", v, max))
			return 0, "", false
		}
		limit = n
	}
	after = q.Get("after")
	if len(after) > node.MaxStringLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after: %d bytes, want at most %d", len(after), node.MaxStringLen))
		return 0, "", false
	}
	return limit, after, true
}

// writeList answers a JSON array of at most limit items (already past the
// cursor, in cursor order). When more remain, the cursor of the next page
// is in the X-Next-After header and a Link rel="next" header, so the body
// stays the plain array it always was.
func writeList[T any](w http.ResponseWriter, r *http.Request, items []T, limit int, cursor func(T) string) {
	if len(items) > limit {
		items = items[:limit]
		next := cursor(items[len(items)-1])
		q := r.URL.Query()
		q.Set("after", next)
		q.Set("limit", strconv.Itoa(limit))
		w.Header().Set("X-Next-After", next)
		w.Header().Set("Link", fmt.Sprintf("<%s?%s>; rel=\"next\"", r.URL.Path, q.Encode()))
	}
	writeJSON(w, http.StatusOK, nonNil(items))
}

// pageAfter drops the items up to and including the cursor (items sorted
// by key ascending).
func pageAfter[T any](items []T, after string, key func(T) string) []T {
	if after == "" {
		return items
	}
	i, _ := slices.BinarySearchFunc(items, after, func(it T, k string) int { return strings.Compare(key(it), k) })
	for i < len(items) && key(items[i]) <= after {
		i++
	}
	return items[i:]
}

// listByKey answers the items get returns, sorted by key and paged with
// ?limit= and ?after= (a key).
func listByKey[T any](w http.ResponseWriter, r *http.Request, get func() []T, key func(T) string) {
	limit, after, ok := pageParams(w, r, maxListLimit, maxListLimit)
	if !ok {
		return
	}
	items := get()
	slices.SortStableFunc(items, func(x, y T) int { return strings.Compare(key(x), key(y)) })
	writeList(w, r, pageAfter(items, after, key), limit, key)
}

// decodeBody decodes one JSON object from the size-limited body into v,
// rejecting unknown fields and trailing data. It writes the 4xx itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/json", ct))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", maxBodyBytes))
			return false
		}
		if errors.Is(err, io.EOF) {
			writeError(w, http.StatusBadRequest, "empty body: want a JSON object")
			return false
		}
		writeError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad JSON body: trailing data after the object")
		return false
	}
	return true
}

// emptyBody rejects a request that carries a body where none is expected.
func emptyBody(w http.ResponseWriter, r *http.Request) bool {
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 1))
	if n > 0 {
		writeError(w, http.StatusBadRequest, "this endpoint takes no body")
		return false
	}
	return true
}

func writeNodeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrQueueFull):
		w.Header().Set("Retry-After", "1")
		writeCode(w, apitypes.CodeQueueFull, err.Error())
		return
	case errors.Is(err, ErrRequestIDReused):
		writeCode(w, apitypes.CodeKeyReused, err.Error())
		return
	case errors.Is(err, ErrForbidden), errors.Is(err, node.ErrUnauthorized):
		// The leader refused this node's certificate (a member asking for
		// an operator action): send it to a voter-capable node's API.
		writeCode(w, apitypes.CodeForbidden, err.Error())
		return
	case errors.Is(err, ErrBadInput):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrNotImplemented):
		code = http.StatusNotImplemented
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = http.StatusGatewayTimeout
	}
	writeError(w, code, err.Error())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apitypes.ErrorBody{Error: msg})
}

// writeCode is writeError with one of the API's codes (apitypes.Code*),
// at its status (apitypes.CodeStatus).
func writeCode(w http.ResponseWriter, code, msg string) {
	writeErrorCode(w, apitypes.CodeStatus[code], code, msg)
}

// writeErrorCode is writeError with a machine-readable code.
func writeErrorCode(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apitypes.ErrorBody{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(apitypes.ErrorBody{Error: "encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// parseCursor parses a numeric ?after= cursor of bitSize bits, or answers
// 400 saying it wants what.
func parseCursor(w http.ResponseWriter, after string, bitSize int, what string) (uint64, bool) {
	n, err := strconv.ParseUint(after, 10, bitSize)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q: want %s", after, what))
		return 0, false
	}
	return n, true
}
