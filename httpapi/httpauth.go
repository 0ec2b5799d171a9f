package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// The HTTP API's bearer tokens. Two scopes: read (GET of every /v1
// endpoint, job payloads and results included) and write (everything).
// The write token also grants read. With no token configured the API is
// open, which the tenure agent allows only on loopback or with
// --http-insecure.

// scope is what a token grants.
type scope int

const (
	scopeNone scope = iota
	scopeRead
	scopeWrite
)

// tokenAuth checks bearer tokens in constant time.
type tokenAuth struct {
	// enabled is false when no token is configured: everything is open.
	enabled bool
	// SHA-256 of the tokens: comparing fixed-size digests keeps the
	// comparison's time independent of the presented token's length.
	writeSum, readSum [sha256.Size]byte
	hasWrite, hasRead bool
}

func newTokenAuth(write, read string) *tokenAuth {
	t := &tokenAuth{enabled: write != "" || read != ""}
	if write != "" {
		t.writeSum, t.hasWrite = sha256.Sum256([]byte(write)), true
	}
	if read != "" {
		t.readSum, t.hasRead = sha256.Sum256([]byte(read)), true
	}
	return t
}

// scopeOf returns the scope the request's token grants, and whether it
// presented one at all.
func (t *tokenAuth) scopeOf(r *http.Request) (s scope, presented bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return scopeNone, false
	}
	kind, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(kind, "Bearer") {
		return scopeNone, true
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	// Compare against both, always.
	w := subtle.ConstantTimeCompare(d[:], t.writeSum[:])
	rd := subtle.ConstantTimeCompare(d[:], t.readSum[:])
	switch {
	case w == 1 && t.hasWrite:
		return scopeWrite, true
	case rd == 1 && t.hasRead:
		return scopeRead, true
	}
	return scopeNone, true
}

// require wraps next so it runs only for a token granting need.
func (t *tokenAuth) require(need scope, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !t.enabled {
			next(w, r)
			return
		}
		got, presented := t.scopeOf(r)
		switch {
		case got >= need:
			next(w, r)
		case got == scopeNone && !presented:
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure"`)
			writeErrorCode(w, http.StatusUnauthorized, "unauthorized", "missing bearer token: send Authorization: Bearer <token> (tenure --token / TENURE_TOKEN)")
		case got == scopeNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure", error="invalid_token"`)
			writeErrorCode(w, http.StatusUnauthorized, "unauthorized", "wrong bearer token")
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure", error="insufficient_scope", scope="write"`)
			writeErrorCode(w, http.StatusForbidden, "forbidden", "this token has the read scope; "+r.Method+" "+r.URL.Path+" needs the write token")
		}
	}
}

func (t *tokenAuth) read(next http.HandlerFunc) http.HandlerFunc  { return t.require(scopeRead, next) }
func (t *tokenAuth) write(next http.HandlerFunc) http.HandlerFunc { return t.require(scopeWrite, next) }

// metricsHandler serves /metrics, under the read scope when protect is set.
func metricsHandler(h http.Handler, t *tokenAuth, protect bool) http.Handler {
	if !protect {
		return h
	}
	return t.read(h.ServeHTTP)
}
