package httpapi_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
	"github.com/tenurehq/tenure/node"
)

// TestAPIThreeScopes: read reads, jobs reads and enqueues, admin does
// everything; each state-changing endpoint needs the scope docs/security.md
// names.
func TestAPIThreeScopes(t *testing.T) {
	_, srv := httpapitest.ServeWith(t, httpapi.Options{Token: "a-token", JobsToken: "j-token", ReadToken: "r-token", DrainWait: 200 * time.Millisecond})
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	type call struct{ method, path, body string }
	enqueue := call{"POST", "/v1/jobs", `{"type":"x","key":"k"}`}
	reads := []call{{"GET", "/v1/status", ""}, {"GET", "/v1/jobs", ""}, {"GET", "/v1/shards", ""}}
	admin := []call{
		{"POST", "/v1/drain?wait=1ms", ""}, {"POST", "/v1/undrain", ""},
		{"GET", "/v1/keyring", ""}, {"POST", "/v1/keyring/install", `{"key":"x"}`},
		{"POST", "/v1/upgrade/finalize", ""},
		{"POST", "/v1/placement/pin", `{"shard":1,"node":"n1"}`}, {"POST", "/v1/placement/exclude", `{"node":"n1"}`},
		{"POST", "/v1/fenced", `{"first":1,"last":1,"fenced":true}`},
	}
	for _, c := range reads {
		for _, tok := range []string{"r-token", "j-token", "a-token"} {
			if r := do(t, srv, c.method, c.path, c.body, bearer(tok)...); r.code != 200 {
				t.Errorf("%s %s with %s: %d %s", c.method, c.path, tok, r.code, r.body)
			}
		}
	}
	if r := do(t, srv, enqueue.method, enqueue.path, enqueue.body, bearer("r-token")...); r.code != 403 || !strings.Contains(r.body, "jobs scope") {
		t.Errorf("enqueue with the read token: %d %s, want 403 naming the jobs scope", r.code, r.body)
	}
	for _, tok := range []string{"j-token", "a-token"} {
		if r := do(t, srv, enqueue.method, enqueue.path, enqueue.body, bearer(tok)...); r.code != 200 && r.code != 201 {
			t.Errorf("enqueue with %s: %d %s", tok, r.code, r.body)
		}
	}
	for _, c := range admin {
		for _, tok := range []string{"r-token", "j-token"} {
			r := do(t, srv, c.method, c.path, c.body, bearer(tok)...)
			if r.code != 403 || !strings.Contains(r.hdr.Get("WWW-Authenticate"), `scope="admin"`) {
				t.Errorf("%s %s with %s: %d %s (WWW-Authenticate %q), want 403 needing admin", c.method, c.path, tok, r.code, r.body, r.hdr.Get("WWW-Authenticate"))
			}
		}
		if r := do(t, srv, c.method, c.path, c.body, bearer("a-token")...); r.code == 401 || r.code == 403 {
			t.Errorf("%s %s with the admin token: %d %s", c.method, c.path, r.code, r.body)
		}
	}
}

// TestAPITokensFile: tokens are added and revoked by rewriting the file,
// without a restart; a file that stops parsing keeps the previous tokens.
func TestAPITokensFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("# tokens\nread r1\njobs j1\n")
	for _, bad := range []string{"bogus r1\n", "read\n", "read r1\njobs r1\n", "read bad\x01tok\n"} {
		p := filepath.Join(t.TempDir(), "bad")
		_ = os.WriteFile(p, []byte(bad), 0o600)
		if _, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{TokensFile: p, NoMetrics: true}); err == nil {
			t.Errorf("tokens file %q accepted", bad)
		}
	}
	h, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{Token: "admin-flag", TokensFile: path, NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	status := func(tok string) int {
		return do(t, srv, "GET", "/v1/status", "", "Authorization", "Bearer "+tok).code
	}
	enq := func(tok string) int {
		return do(t, srv, "POST", "/v1/jobs", `{"type":"x","key":"k"}`, "Authorization", "Bearer "+tok).code
	}
	if status("r1") != 200 || enq("r1") != 403 || enq("j1") >= 300 || status("admin-flag") != 200 {
		t.Fatalf("initial tokens: r1 %d/%d, j1 enqueue %d", status("r1"), enq("r1"), enq("j1"))
	}
	// Revoke r1, add r2 (another size, so the change is seen even within
	// one mtime tick).
	write("read r2-longer\njobs j1\n")
	waitFor(t, 5*time.Second, "r1 revoked and r2 added", func() bool { return status("r1") == 401 && status("r2-longer") == 200 })
	// A broken file keeps the tokens it had.
	write("read r3 and more\n")
	if err := httpapi.ReloadTokens(h); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("reloading a broken tokens file: %v, want an error naming line 1", err)
	}
	if status("r2-longer") != 200 || status("r3") != 401 {
		t.Fatal("a broken tokens file dropped the previous tokens or let a new one in")
	}
	if status("admin-flag") != 200 {
		t.Fatal("the --token admin token stopped working")
	}
}

// TestAPIBrowserSafety: a state-changing request a web page could send
// (no or another Content-Type, a foreign Origin, Sec-Fetch-Site
// cross-site) is refused before it reaches a handler, even on an open API;
// a Host the agent does not answer to (DNS rebinding) is refused for reads
// too.
func TestAPIBrowserSafety(t *testing.T) {
	f, srv := httpapitest.ServeWith(t, httpapi.Options{AllowedHosts: []string{"tenure.internal"}, DrainWait: 200 * time.Millisecond})
	for _, c := range []struct {
		name string
		hdr  []string
		code int
	}{
		{"no content type (no-cors fetch)", []string{"Content-Type", ""}, 415},
		{"text/plain", []string{"Content-Type", "text/plain"}, 415},
		{"form", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"foreign origin", []string{"Origin", "https://evil.example"}, 403},
		{"null origin", []string{"Origin", "null"}, 403},
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site"}, 403},
	} {
		if r := do(t, srv, "POST", "/v1/drain?wait=1ms", "", c.hdr...); r.code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, r.code, r.body, c.code)
		}
	}
	if f.Members()[0].Draining {
		t.Fatal("a refused request drained the node")
	}
	// Same origin with the JSON type passes.
	if r := do(t, srv, "POST", "/v1/drain?wait=1ms", "", "Origin", srv.URL, "Sec-Fetch-Site", "same-origin"); r.code >= 400 {
		t.Errorf("same-origin drain: %d %s", r.code, r.body)
	}
	h, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{AllowedHosts: []string{"tenure.internal"}, NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for host, want := range map[string]int{
		"rebind.evil.example:7948": http.StatusMisdirectedRequest,
		"tenure.internal:7948":     200,
		"TENURE.internal.":         200,
		"10.1.2.3:7948":            200,
		"[::1]:7948":               200,
		"localhost:7948":           200,
		"app.localhost":            200,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/status", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: %d %s, want %d", host, rec.Code, rec.Body, want)
		}
	}
}

// TestDashboardWritesNoMarkup: the dashboard builds every element with
// DOM calls; data (owner ids, job fields) never reaches an HTML parser.
func TestDashboardWritesNoMarkup(t *testing.T) {
	files, err := filepath.Glob("dashboard/*.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("dashboard scripts: %v %v", files, err)
	}
	bad := regexp.MustCompile(`\.(innerHTML|outerHTML)\s*[+]?=|insertAdjacentHTML|document\.write|\beval\(|new Function\(`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if bad.MatchString(line) {
				t.Errorf("%s:%d writes markup: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestAPIForbiddenIsClear: the leader's refusal of an operator action a
// member certificate forwarded answers 403 with the leader's reason.
func TestAPIForbiddenIsClear(t *testing.T) {
	err := fmt.Errorf("%w: ledger: not authorized: member m1 may not propose PinShard: operator action: it needs an operator certificate, or an admin request to a voter-capable node's API", node.ErrUnauthorized)
	rec := httptest.NewRecorder()
	httpapi.WriteNodeError(rec, err)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "voter-capable node's API") || !strings.Contains(rec.Body.String(), `"forbidden"`) {
		t.Fatalf("%d %s, want 403 forbidden with the reason", rec.Code, rec.Body)
	}
	if !errors.Is(httpapi.Classify(err), httpapi.ErrForbidden) {
		t.Fatal("node.ErrUnauthorized is not classified as ErrForbidden")
	}
}
