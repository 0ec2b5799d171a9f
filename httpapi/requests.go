package httpapi

// Request ids and consistent reads (docs/api.md, "Idempotency keys" and
// "Consistent reads").

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// MaxIdempotencyKeyLen bounds the Idempotency-Key header (Stripe's limit).
const MaxIdempotencyKeyLen = 255

// HeaderIdempotencyKey names the request id header of POST /v1/jobs
// (draft-ietf-httpapi-idempotency-key-header).
const HeaderIdempotencyKey = apitypes.HeaderIdempotencyKey

// RequestIDFromKey maps an Idempotency-Key to the ledger's 16-byte request
// id: the first 16 bytes of SHA-256 over a fixed prefix and the key. Every
// node maps a key alike, so a retry through another node finds the first
// try. The client package uses the same function.
func RequestIDFromKey(key string) [16]byte {
	sum := sha256.Sum256([]byte("tenure idempotency key\x00" + key))
	var id [16]byte
	copy(id[:], sum[:16])
	return id
}

// ParseIdempotencyKey checks an Idempotency-Key header value: a structured
// field string ("…", as the draft writes it) or a bare token, 1 to
// MaxIdempotencyKeyLen bytes of printable ASCII without quotes. It returns the key without
// its quotes.
func ParseIdempotencyKey(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		s, err := strconv.Unquote(v)
		if err != nil {
			return "", fmt.Errorf("Idempotency-Key %.40q: not a valid quoted string", v)
		}
		v = s
	}
	if len(v) == 0 || len(v) > MaxIdempotencyKeyLen {
		return "", fmt.Errorf("Idempotency-Key of %d bytes: want 1 to %d", len(v), MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e || v[i] == '"' {
			return "", fmt.Errorf("Idempotency-Key: byte %d is not printable ASCII (or is a quote)", i)
		}
	}
	return v, nil
}

// idempotencyKey reads the request's Idempotency-Key: its request id and
// whether one was given. A bad header answers 400 (ok false).
func idempotencyKey(w http.ResponseWriter, r *http.Request) (id [16]byte, given, ok bool) {
	vals := r.Header.Values(HeaderIdempotencyKey)
	switch len(vals) {
	case 0:
		return id, false, true
	case 1:
	default:
		writeCode(w, apitypes.CodeInvalid, "more than one Idempotency-Key header")
		return id, false, false
	}
	key, err := ParseIdempotencyKey(vals[0])
	if err != nil {
		writeCode(w, apitypes.CodeInvalid, err.Error())
		return id, false, false
	}
	return RequestIDFromKey(key), true, true
}

// readBarrier serves ?consistent=true: it waits for the node's read
// barrier before the handler reads its replica. It answers the error
// itself (ok false): 400 for a bad value, 501 when the node offers no
// barriers (or the cluster runs a version before 5), 503 when no barrier
// was reached (no quorum), 504 when the request's context ended.
func (h *Handler) readBarrier(w http.ResponseWriter, r *http.Request) bool {
	v := r.URL.Query().Get("consistent")
	if v == "" {
		return true
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("consistent %.40q: want true or false", v))
		return false
	}
	if !on {
		return true
	}
	rb, can := h.node.(RequestBackend)
	if !can {
		writeNodeError(w, fmt.Errorf("%w: consistent reads", ErrNotImplemented))
		return false
	}
	if err := rb.ReadBarrier(r.Context()); err != nil {
		writeNodeError(w, err)
		return false
	}
	return true
}
