package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// The HTTP API's bearer tokens and their scopes (docs/security.md):
//
//   - read: GET of every /v1 endpoint (job payloads and results included);
//   - jobs: read, plus enqueueing jobs (POST /v1/jobs) — what a service
//     needs;
//   - admin: everything: drain, undrain, the keyring, upgrade finalize,
//     pins and exclusions, fenced takeover.
//
// Tokens come from Options (Token: admin, JobsToken: jobs, ReadToken: read)
// and from a tokens file (Options.TokensFile: lines `scope token`), which
// is re-read when its size or modification time changes, so tokens are
// added and revoked without a restart. With no token and no file the API
// is open, which the tenure agent allows only on loopback or with
// --http-insecure.

// scope is what a token grants; each scope includes the ones below it.
type scope int

const (
	scopeNone scope = iota
	scopeRead
	scopeJobs
	scopeAdmin
)

var scopeNames = [...]string{scopeNone: "none", scopeRead: "read", scopeJobs: "jobs", scopeAdmin: "admin"}

func (s scope) String() string { return scopeNames[s] }

// parseScope reads a scope name of the tokens file ("write" is the old name
// of admin).
func parseScope(s string) (scope, bool) {
	switch s {
	case "read":
		return scopeRead, true
	case "jobs":
		return scopeJobs, true
	case "admin", "write":
		return scopeAdmin, true
	}
	return scopeNone, false
}

// tokenSet is a set of token digests with their scopes. SHA-256 digests
// are compared with crypto/subtle, so neither a token's content nor its
// length leaks through timing; every entry is compared on every request.
type tokenSet struct {
	sums   [][sha256.Size]byte
	scopes []scope
}

func (ts *tokenSet) add(tok string, s scope) error {
	if tok == "" {
		return nil
	}
	if err := apitypes.CheckToken(tok); err != nil {
		return err
	}
	d := sha256.Sum256([]byte(tok))
	for _, have := range ts.sums {
		if have == d {
			return errors.New("the same token is listed twice: give each scope a token of its own")
		}
	}
	ts.sums, ts.scopes = append(ts.sums, d), append(ts.scopes, s)
	return nil
}

func (ts *tokenSet) lookup(d [sha256.Size]byte) scope {
	got := scopeNone
	for i := range ts.sums {
		if subtle.ConstantTimeCompare(d[:], ts.sums[i][:]) == 1 {
			got = max(got, ts.scopes[i])
		}
	}
	return got
}

// maxTokensFile bounds the tokens file.
const maxTokensFile = 1 << 20

// parseTokens reads a tokens file: one `scope token` per line (scope read,
// jobs or admin), blank lines and lines starting with # ignored.
func parseTokens(b []byte) (*tokenSet, error) {
	ts := &tokenSet{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxTokensFile)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, tok, ok := strings.Cut(text, " ")
		tok = strings.TrimSpace(tok)
		if !ok || tok == "" {
			return nil, fmt.Errorf("line %d: want `scope token` (scope read, jobs or admin)", line)
		}
		s, ok := parseScope(name)
		if !ok {
			return nil, fmt.Errorf("line %d: unknown scope %q: want read, jobs or admin", line, name)
		}
		if err := ts.add(tok, s); err != nil {
			return nil, fmt.Errorf("line %d: token: %v", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ts, nil
}

// tokensReloadEvery is how often at most the tokens file is checked for a
// change (on the next request).
const tokensReloadEvery = time.Second

// tokenFile is a tokens file re-read when it changes. A file that cannot be
// read or parsed keeps the previous tokens and logs an error.
type tokenFile struct {
	path  string
	log   *slog.Logger
	every time.Duration

	mu        sync.Mutex
	checked   time.Time
	size      int64
	mod       time.Time
	set       atomic.Pointer[tokenSet]
	reloadErr error
}

func newTokenFile(path string, log *slog.Logger) (*tokenFile, error) {
	f := &tokenFile{path: path, log: log, every: tokensReloadEvery}
	if err := f.reload(time.Now(), true); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *tokenFile) read() (*tokenSet, os.FileInfo, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxTokensFile+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxTokensFile {
		return nil, nil, fmt.Errorf("larger than %d bytes", maxTokensFile)
	}
	ts, err := parseTokens(b)
	return ts, fi, err
}

// reload re-reads the file if it changed (or force).
func (f *tokenFile) reload(now time.Time, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !force && now.Sub(f.checked) < f.every {
		return nil
	}
	f.checked = now
	if !force {
		fi, err := os.Stat(f.path)
		if err == nil && fi.Size() == f.size && fi.ModTime().Equal(f.mod) {
			return nil
		}
	}
	ts, fi, err := f.read()
	if err != nil {
		err = fmt.Errorf("httpapi: tokens file %s: %w", f.path, err)
		if !force && (f.reloadErr == nil || f.reloadErr.Error() != err.Error()) && f.log != nil {
			f.log.Error("keeping the previous API tokens", "err", err)
		}
		f.reloadErr = err
		return err
	}
	f.reloadErr = nil
	f.size, f.mod = fi.Size(), fi.ModTime()
	if old := f.set.Swap(ts); old != nil && f.log != nil {
		f.log.Info("API tokens reloaded", "file", f.path, "tokens", len(ts.sums))
	}
	return nil
}

func (f *tokenFile) current() *tokenSet {
	_ = f.reload(time.Now(), false)
	return f.set.Load()
}

// tokenAuth checks bearer tokens in constant time.
type tokenAuth struct {
	// enabled is false when no token and no tokens file is configured:
	// everything is open.
	enabled bool
	static  tokenSet
	file    *tokenFile // nil without a tokens file
}

// newTokenAuth returns the checker of o's tokens and tokens file.
func newTokenAuth(o Options) (*tokenAuth, error) {
	t := &tokenAuth{}
	for _, tk := range []struct {
		name string
		tok  string
		s    scope
	}{{"token", o.Token, scopeAdmin}, {"jobs token", o.JobsToken, scopeJobs}, {"read token", o.ReadToken, scopeRead}} {
		if err := t.static.add(tk.tok, tk.s); err != nil {
			return nil, fmt.Errorf("httpapi: %s: %v", tk.name, err)
		}
	}
	if o.TokensFile != "" {
		f, err := newTokenFile(o.TokensFile, o.Logger)
		if err != nil {
			return nil, err
		}
		t.file = f
	}
	t.enabled = len(t.static.sums) > 0 || t.file != nil
	return t, nil
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
	got := t.static.lookup(d)
	if t.file != nil {
		if fs := t.file.current(); fs != nil {
			got = max(got, fs.lookup(d))
		}
	}
	return got, true
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
			writeCode(w, apitypes.CodeUnauthorized, "missing bearer token: send Authorization: Bearer <token> (tenure --token / TENURE_TOKEN)")
		case got == scopeNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure", error="invalid_token"`)
			writeCode(w, apitypes.CodeUnauthorized, "wrong bearer token")
		default:
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="tenure", error="insufficient_scope", scope=%q`, need.String()))
			writeCode(w, apitypes.CodeForbidden, fmt.Sprintf("this token has the %s scope; %s %s needs the %s scope", got, r.Method, r.URL.Path, need))
		}
	}
}

func (t *tokenAuth) read(next http.HandlerFunc) http.HandlerFunc  { return t.require(scopeRead, next) }
func (t *tokenAuth) jobs(next http.HandlerFunc) http.HandlerFunc  { return t.require(scopeJobs, next) }
func (t *tokenAuth) admin(next http.HandlerFunc) http.HandlerFunc { return t.require(scopeAdmin, next) }

// metricsHandler serves /metrics, under the read scope when protect is set.
func metricsHandler(h http.Handler, t *tokenAuth, protect bool) http.Handler {
	if !protect {
		return h
	}
	return t.read(h.ServeHTTP)
}
