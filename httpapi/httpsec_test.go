package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/node"
)

// serveScoped serves the API over a fakeNode with a write and a read token.
func serveScoped(t *testing.T, metricsAuth bool) (*httpapitest.Node, *httptest.Server) {
	t.Helper()
	f := httpapitest.NewNode()
	a, err := httpapi.NewWithBackend(f, httpapi.Options{Token: "w-token", ReadToken: "r-token", MetricsAuth: metricsAuth,
		DrainWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return f, srv
}

func TestAPIScopes(t *testing.T) {
	_, srv := serveScoped(t, false)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	// The write token enqueues (and a job's payload is then readable).
	if r := do(t, srv, "POST", "/v1/jobs", `{"type":"x","key":"k","payload":{"secret":1}}`, bearer("w-token")...); r.code != 201 {
		t.Fatalf("enqueue with the write token: %d %s", r.code, r.body)
	}
	cases := []struct {
		method, path, body string
		hdr                []string
		code               int
		errCode            string
	}{
		{"GET", "/v1/shards", "", nil, 401, "unauthorized"},
		{"GET", "/v1/jobs/1", "", nil, 401, "unauthorized"},
		{"GET", "/v1/jobs", "", nil, 401, "unauthorized"},
		{"GET", "/v1/status", "", bearer("nope"), 401, "unauthorized"},
		{"GET", "/v1/status", "", []string{"Authorization", "Basic r-token"}, 401, "unauthorized"},
		{"GET", "/v1/nosuch", "", nil, 401, "unauthorized"},
		{"GET", "/v1/shards", "", bearer("r-token"), 200, ""},
		{"GET", "/v1/shards", "", []string{"Authorization", "bearer  r-token "}, 200, ""},
		{"GET", "/v1/members", "", bearer("r-token"), 200, ""},
		{"GET", "/v1/elections", "", bearer("r-token"), 200, ""},
		{"GET", "/v1/moves", "", bearer("r-token"), 200, ""},
		{"GET", "/v1/jobs/1", "", bearer("r-token"), 200, ""},
		{"GET", "/v1/jobs", "", bearer("w-token"), 200, ""},
		{"GET", "/v1/nosuch", "", bearer("r-token"), 404, ""},
		{"POST", "/v1/jobs", `{"type":"x","key":"k2"}`, bearer("r-token"), 403, "forbidden"},
		{"POST", "/v1/drain", "", bearer("r-token"), 403, "forbidden"},
		{"POST", "/v1/undrain", "", bearer("r-token"), 403, "forbidden"},
		{"POST", "/v1/drain", "", nil, 401, "unauthorized"},
		{"POST", "/v1/undrain", "", bearer("w-token"), 200, ""},
		{"GET", "/healthz", "", nil, 200, ""},
		{"GET", "/readyz", "", nil, 200, ""},
		{"GET", "/metrics", "", nil, 200, ""},
		{"GET", "/", "", nil, 200, ""},
	}
	for _, c := range cases {
		r := do(t, srv, c.method, c.path, c.body, c.hdr...)
		if r.code != c.code {
			t.Errorf("%s %s %v: %d %s, want %d", c.method, c.path, c.hdr, r.code, r.body, c.code)
			continue
		}
		if c.errCode == "" {
			continue
		}
		var e apitypes.ErrorBody
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Code != c.errCode || e.Error == "" {
			t.Errorf("%s %s %v: body %q, want a JSON error with code %q", c.method, c.path, c.hdr, r.body, c.errCode)
		}
		if c.code == 401 && !strings.HasPrefix(r.hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer (%q)", c.method, c.path, r.hdr.Get("WWW-Authenticate"))
		}
	}
	if r := do(t, srv, "GET", "/v1/jobs/1", "", bearer("r-token")...); !strings.Contains(r.body, `"secret":1`) {
		t.Fatalf("read scope does not see the payload: %s", r.body)
	}
}

func TestAPIMetricsAuth(t *testing.T) {
	_, srv := serveScoped(t, true)
	if r := do(t, srv, "GET", "/metrics", ""); r.code != 401 {
		t.Fatalf("/metrics without token under --metrics-auth: %d", r.code)
	}
	if r := do(t, srv, "GET", "/metrics", "", "Authorization", "Bearer r-token"); r.code != 200 || !strings.Contains(r.body, "tenure_") {
		t.Fatalf("/metrics with the read token: %d", r.code)
	}
	if r := do(t, srv, "GET", "/healthz", ""); r.code != 200 {
		t.Fatalf("/healthz: %d", r.code)
	}
	// The handler served while joining protects /metrics the same way.
	st := httptest.NewServer(httpapi.StartingHandler(httpapi.Options{Token: "w", ReadToken: "r", MetricsAuth: true, Registry: prometheus.NewRegistry()}))
	defer st.Close()
	if r := do(t, st, "GET", "/metrics", ""); r.code != 401 {
		t.Fatalf("starting /metrics without token: %d", r.code)
	}
}

// Enqueue limits answer at once, before anything reaches the node, and
// node-side refusals map to 400 / 429.
func TestAPIEnqueueLimits(t *testing.T) {
	f, srv := serveFake(t, "")
	long := strings.Repeat("k", ledger.MaxStringLen+1)
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{fmt.Sprintf(`{"type":"x","key":%q}`, long), 400, `key\" is 4097 bytes`},
		{fmt.Sprintf(`{"type":%q,"key":"k"}`, long), 400, `type\" is 4097 bytes`},
		{fmt.Sprintf(`{"type":"x","key":"k","shard_key":%q}`, long), 400, `shard_key\" is 4097 bytes`},
		{fmt.Sprintf(`{"type":"x","key":"k","payload":"%s"}`, strings.Repeat("p", ledger.DefaultMaxPayload)), 413, `payload\" is 1048578 bytes`},
		{fmt.Sprintf(`{"type":"x","key":"k","payload":"%s"}`, strings.Repeat("p", httpapi.MaxBodyBytes)), 413, "body larger than"},
	} {
		start := time.Now()
		r := do(t, srv, "POST", "/v1/jobs", c.body)
		if r.code != c.code || !strings.Contains(r.body, c.want) || time.Since(start) > 5*time.Second {
			t.Errorf("%.40s…: %d %.200s after %v, want %d with %q", c.body, r.code, r.body, time.Since(start), c.code, c.want)
		}
	}
	if n := len(f.Jobs(httpapi.JobQuery{})); n != 0 {
		t.Fatalf("%d jobs reached the node", n)
	}
	// What the node refuses: invalid → 400, queue full → 429 with a code.
	f.EnqueueErr = httpapi.Classify(fmt.Errorf("node: enqueue: %w: key too long: %w", node.ErrInvalid, ledger.ErrTooLarge))
	if r := do(t, srv, "POST", "/v1/jobs", `{"type":"x","key":"k"}`); r.code != 400 {
		t.Fatalf("node.ErrInvalid: %d %s", r.code, r.body)
	}
	f.EnqueueErr = httpapi.Classify(fmt.Errorf("node: enqueue: %w: shard 3 holds 10 pending jobs", node.ErrQueueFull))
	r := do(t, srv, "POST", "/v1/jobs", `{"type":"x","key":"k"}`)
	var e apitypes.ErrorBody
	if r.code != http.StatusTooManyRequests || json.Unmarshal([]byte(r.body), &e) != nil || e.Code != "queue_full" || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("node.ErrQueueFull: %d %s %v", r.code, r.body, r.hdr)
	}
	if !errors.Is(f.EnqueueErr, httpapi.ErrQueueFull) {
		t.Fatal("classify lost ErrQueueFull")
	}
	// The refusal is counted (the queue-full alert, deploy/prometheus).
	if m := do(t, srv, "GET", "/metrics", ""); !strings.Contains(m.body, "tenure_job_enqueues_refused_total 1\n") {
		t.Fatalf("queue-full refusal not counted:\n%.2000s", m.body)
	}
}

func TestAPIPagination(t *testing.T) {
	f, srv := serveFake(t, "")
	for i := range 7 {
		if r := do(t, srv, "POST", "/v1/jobs", fmt.Sprintf(`{"type":"x","key":"k%d"}`, i)); r.code != 201 {
			t.Fatal(r.body)
		}
	}
	var ids []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		r := do(t, srv, "GET", "/v1/jobs?limit=3&after="+after, "")
		js := decodeAs[apitypes.JobList](t, r)
		if len(js.Jobs) > 3 || js.Counts["pending"] != 7 {
			t.Fatalf("page: %d jobs, counts %v", len(js.Jobs), js.Counts)
		}
		for _, j := range js.Jobs {
			ids = append(ids, j.ID)
		}
		if js.Next == "" {
			break
		}
		after = js.Next
	}
	if strings.Join(ids, ",") != "1,2,3,4,5,6,7" {
		t.Fatalf("paged ids %v", ids)
	}
	for _, q := range []string{"limit=0", "limit=10001", "limit=x", "after=x"} {
		if r := do(t, srv, "GET", "/v1/jobs?"+q, ""); r.code != 400 {
			t.Errorf("jobs?%s: %d", q, r.code)
		}
	}
	// Shards: an array page with the next cursor in headers.
	all := f.Shards()
	r := do(t, srv, "GET", "/v1/shards?limit=3", "")
	page := decodeAs[[]apitypes.Shard](t, r)
	if len(page) != 3 || r.hdr.Get("X-Next-After") != fmt.Sprint(page[2].Shard) || !strings.Contains(r.hdr.Get("Link"), `rel="next"`) {
		t.Fatalf("shards page: %d, next %q, link %q", len(page), r.hdr.Get("X-Next-After"), r.hdr.Get("Link"))
	}
	r = do(t, srv, "GET", "/v1/shards?limit=100&after="+r.hdr.Get("X-Next-After"), "")
	rest := decodeAs[[]apitypes.Shard](t, r)
	if len(rest) != len(all)-3 || rest[0].Shard != page[2].Shard+1 || r.hdr.Get("X-Next-After") != "" {
		t.Fatalf("second shards page: %d of %d, next %q", len(rest), len(all), r.hdr.Get("X-Next-After"))
	}
	r = do(t, srv, "GET", "/v1/members?limit=1", "")
	ms := decodeAs[[]apitypes.Member](t, r)
	r2 := do(t, srv, "GET", "/v1/members?after="+r.hdr.Get("X-Next-After"), "")
	ms2 := decodeAs[[]apitypes.Member](t, r2)
	if len(ms) != 1 || len(ms2) != len(f.Members())-1 || ms2[0].ID <= ms[0].ID {
		t.Fatalf("members pages: %v then %v", ms, ms2)
	}
	if r := do(t, srv, "GET", "/v1/moves?limit=0", ""); r.code != 400 {
		t.Fatalf("moves?limit=0: %d", r.code)
	}
}
