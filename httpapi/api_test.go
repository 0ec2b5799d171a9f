package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveFake starts the API over a fakeNode, with Run feeding /v1/moves.
func serveFake(t *testing.T, token string) (*httpapitest.Node, *httptest.Server) {
	t.Helper()
	return httpapitest.Serve(t, token)
}

// TestAPIErrorsAreJSON runs every bad request and checks the status code
// and that the body is a JSON error naming the problem.
func TestAPIErrorsAreJSON(t *testing.T) {
	_, srv := serveFake(t, "")
	big := `{"type":"x","key":"k","payload":"` + strings.Repeat("a", httpapi.MaxBodyBytes) + `"}`
	cases := []struct {
		method, path, body string
		hdr                []string
		code               int
		want               string
	}{
		{"GET", "/v1/nope", "", nil, 404, "no such endpoint"},
		{"DELETE", "/v1/status", "", nil, 405, "not allowed"},
		{"POST", "/v1/shards", "{}", nil, 405, "not allowed"},
		{"GET", "/v1/drain", "", nil, 405, "not allowed"},
		{"GET", "/v1/shards/abc", "", nil, 400, `"abc"`},
		{"GET", "/v1/shards/-1", "", nil, 400, `"-1"`},
		{"GET", "/v1/shards/99999999999", "", nil, 400, "99999999999"},
		{"GET", "/v1/shards/100", "", nil, 404, "shard 100"},
		{"GET", "/v1/shards?state=bogus", "", nil, 400, `"bogus"`},
		{"GET", "/v1/jobs/77", "", nil, 404, `"77"`},
		{"GET", "/v1/jobs?shard=x", "", nil, 400, `"x"`},
		{"GET", "/v1/jobs?state=running", "", nil, 400, `"running"`},
		{"GET", "/v1/jobs?limit=0", "", nil, 400, "limit"},
		{"GET", "/v1/jobs?limit=abc", "", nil, 400, "limit"},
		{"POST", "/v1/jobs", "", nil, 400, "empty body"},
		{"POST", "/v1/jobs", "{", nil, 400, "bad JSON"},
		{"POST", "/v1/jobs", "[1,2]", nil, 400, "bad JSON"},
		{"POST", "/v1/jobs", `{"type":"x","key":"k"} {}`, nil, 400, "trailing"},
		{"POST", "/v1/jobs", `{"type":"x","key":"k","bogus":1}`, nil, 400, "bogus"},
		{"POST", "/v1/jobs", `{"key":"k"}`, nil, 400, `"type"`},
		{"POST", "/v1/jobs", `{"type":"x"}`, nil, 400, `"key" or "shard_key"`},
		{"POST", "/v1/jobs", `{"type":"x","key":3}`, nil, 400, "bad JSON"},
		{"POST", "/v1/jobs", `{"type":"x","shard_key":"bad"}`, nil, 400, `"bad"`},
		{"POST", "/v1/jobs", `{"type":"x","key":"k"}`, []string{"Content-Type", "text/plain"}, 415, "text/plain"},
		{"POST", "/v1/jobs", big, nil, 413, "larger than"},
		{"POST", "/v1/drain", "please", nil, 400, "no body"},
		{"POST", "/v1/drain?wait=forever", "", nil, 400, `"forever"`},
		{"POST", "/v1/drain?wait=-1s", "", nil, 400, `"-1s"`},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := do(t, srv, c.method, c.path, c.body, c.hdr...)
			if r.code != c.code {
				t.Fatalf("code %d, want %d; body %s", r.code, c.code, r.body)
			}
			e := decodeAs[apitypes.ErrorBody](t, r)
			if !strings.Contains(e.Error, c.want) {
				t.Fatalf("error %q does not mention %q", e.Error, c.want)
			}
			if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
}

func TestAPIStatusShardsMembersElections(t *testing.T) {
	_, srv := serveFake(t, "")
	st := decodeAs[apitypes.Status](t, do(t, srv, "GET", "/v1/status", ""))
	if st.Node != "n1" || st.ControlLeader != "n2" || len(st.Voters) != 3 || len(st.Members) != 3 || st.Health.Status != apitypes.StatusHealthy || st.Version != "test" {
		t.Fatalf("status: %+v", st)
	}
	shards := decodeAs[[]apitypes.Shard](t, do(t, srv, "GET", "/v1/shards", ""))
	if len(shards) != 8 || shards[0].Owner != "n1" || !shards[0].Acting || shards[7].State != "unowned" {
		t.Fatalf("shards: %+v", shards)
	}
	owned := decodeAs[[]apitypes.Shard](t, do(t, srv, "GET", "/v1/shards?owner=n2&state=owned", ""))
	for _, s := range owned {
		if s.Owner != "n2" || s.State != "owned" {
			t.Fatalf("filter leaked %+v", s)
		}
	}
	if len(owned) != 2 {
		t.Fatalf("n2 owns %d shards, want 2", len(owned))
	}
	one := decodeAs[apitypes.Shard](t, do(t, srv, "GET", "/v1/shards/4", ""))
	if one.Shard != 4 || one.Owner != "n2" || one.Epoch != 5 {
		t.Fatalf("shard 4: %+v", one)
	}
	mem := decodeAs[[]apitypes.Member](t, do(t, srv, "GET", "/v1/members", ""))
	if len(mem) != 3 || !mem[1].Leader {
		t.Fatalf("members: %+v", mem)
	}
	el := decodeAs[[]apitypes.Election](t, do(t, srv, "GET", "/v1/elections", ""))
	if len(el) != 1 || el[0].Name != "cron" || el[0].Shard != 6 || el[0].Leader != "n1" {
		t.Fatalf("elections: %+v", el)
	}
	if r := do(t, srv, "HEAD", "/v1/status", ""); r.code != 200 {
		t.Fatalf("HEAD status: %d", r.code)
	}
}

func TestAPIJobs(t *testing.T) {
	f, srv := serveFake(t, "")
	r := do(t, srv, "POST", "/v1/jobs", `{"type":"email","key":"order-1","payload":{"to":"a@b"}}`, "Content-Type", "application/json")
	if r.code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", r.code, r.body)
	}
	j := decodeAs[apitypes.Job](t, r)
	if j.ID == "" || j.State != "pending" || string(j.Payload) != `{"to":"a@b"}` || r.hdr.Get("Location") != "/v1/jobs/"+j.ID {
		t.Fatalf("job: %+v location %q", j, r.hdr.Get("Location"))
	}
	// The same key is the same job, answered with 200.
	r = do(t, srv, "POST", "/v1/jobs", `{"type":"email","key":"order-1"}`)
	if r.code != http.StatusOK || decodeAs[apitypes.Job](t, r).ID != j.ID {
		t.Fatalf("duplicate enqueue: %d %s", r.code, r.body)
	}
	r = do(t, srv, "POST", "/v1/jobs", `{"type":"email","shard_key":"ab"}`)
	if r.code != http.StatusCreated || decodeAs[apitypes.Job](t, r).Shard != 2 {
		t.Fatalf("enqueue to shard: %d %s", r.code, r.body)
	}
	f.SetJobState("2", "completed")
	got := decodeAs[apitypes.Job](t, do(t, srv, "GET", "/v1/jobs/"+j.ID, ""))
	if got.Key != "order-1" {
		t.Fatalf("get job: %+v", got)
	}
	list := decodeAs[apitypes.JobList](t, do(t, srv, "GET", "/v1/jobs", ""))
	if len(list.Jobs) != 2 || list.Counts["pending"] != 1 || list.Counts["completed"] != 1 || list.Counts["dead"] != 0 {
		t.Fatalf("list: %+v", list)
	}
	list = decodeAs[apitypes.JobList](t, do(t, srv, "GET", "/v1/jobs?state=completed", ""))
	if len(list.Jobs) != 1 || list.Jobs[0].ID != "2" || list.Counts["pending"] != 1 {
		t.Fatalf("list completed: %+v", list)
	}
	list = decodeAs[apitypes.JobList](t, do(t, srv, "GET", "/v1/jobs?shard=2&limit=1", ""))
	if len(list.Jobs) != 1 || list.Counts["pending"] != 0 {
		t.Fatalf("list shard 2: %+v", list)
	}
	list = decodeAs[apitypes.JobList](t, do(t, srv, "GET", "/v1/jobs?shard=5", ""))
	if list.Jobs == nil || len(list.Jobs) != 0 {
		t.Fatalf("empty list must be [] not null: %s", do(t, srv, "GET", "/v1/jobs?shard=5", "").body)
	}
}

func TestAPINodeErrorsMapToStatus(t *testing.T) {
	f, srv := serveFake(t, "")
	cases := []struct {
		err  error
		code int
	}{
		{fmt.Errorf("%w: no quorum", httpapi.ErrUnavailable), 503},
		{fmt.Errorf("%w: job state", httpapi.ErrConflict), 409},
		{fmt.Errorf("%w: nope", httpapi.ErrBadInput), 400},
		{fmt.Errorf("%w: gone", httpapi.ErrNotFound), 404},
		{context.DeadlineExceeded, 504},
		{errors.New("disk on fire"), 500},
	}
	for _, c := range cases {
		f.EnqueueErr = c.err
		r := do(t, srv, "POST", "/v1/jobs", `{"type":"x","key":"k"}`)
		if r.code != c.code || decodeAs[apitypes.ErrorBody](t, r).Error != c.err.Error() {
			t.Fatalf("%v: got %d %s, want %d", c.err, r.code, r.body, c.code)
		}
	}
}

func TestAPIAuth(t *testing.T) {
	_, srv := serveFake(t, "s3cret")
	for _, p := range []string{"/v1/jobs", "/v1/drain", "/v1/undrain"} {
		body := ""
		if p == "/v1/jobs" {
			body = `{"type":"x","key":"k"}`
		}
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
			r := do(t, srv, "POST", p, body, hdr...)
			if r.code != http.StatusUnauthorized || r.hdr.Get("WWW-Authenticate") == "" {
				t.Fatalf("POST %s with %v: %d %s", p, hdr, r.code, r.body)
			}
		}
		r := do(t, srv, "POST", p, body, "Authorization", "Bearer s3cret")
		if r.code >= 300 {
			t.Fatalf("POST %s with token: %d %s", p, r.code, r.body)
		}
	}
	// With a token set, reads need one too (the write token grants read).
	if r := do(t, srv, "GET", "/v1/shards", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("GET without token: %d", r.code)
	}
	if r := do(t, srv, "GET", "/v1/shards", "", "Authorization", "Bearer s3cret"); r.code != 200 {
		t.Fatalf("GET with the write token: %d", r.code)
	}
}

func TestAPIDrainAndMoves(t *testing.T) {
	f, srv := serveFake(t, "")
	r := do(t, srv, "POST", "/v1/drain", "")
	d := decodeAs[apitypes.Drain](t, r)
	if r.code != 200 || !d.Done || d.Owned != 0 || d.Node != "n1" {
		t.Fatalf("drain: %d %s", r.code, r.body)
	}
	// Run records the fake's drain moves; wait for them.
	deadline := time.Now().Add(10 * time.Second)
	var moves []apitypes.Move
	for {
		moves = decodeAs[[]apitypes.Move](t, do(t, srv, "GET", "/v1/moves", ""))
		if len(moves) == 3 || time.Now().After(deadline) {
			break
		}
		<-time.After(5 * time.Millisecond)
	}
	if len(moves) != 3 || moves[0].From != "n1" || moves[0].To != "n2" || moves[0].Reason != "drain n1" || moves[0].Cause != "drain of n1" || moves[0].Shard != 6 {
		t.Fatalf("moves: %+v", moves)
	}
	r = do(t, srv, "POST", "/v1/undrain", "")
	if r.code != 200 || decodeAs[apitypes.Drain](t, r).Draining {
		t.Fatalf("undrain: %d %s", r.code, r.body)
	}
	// A drain that does not finish in time answers 202, still draining.
	f.DrainBlocks = true
	r = do(t, srv, "POST", "/v1/drain?wait=10ms", "")
	if r.code != http.StatusAccepted || decodeAs[apitypes.Drain](t, r).Done {
		t.Fatalf("slow drain: %d %s", r.code, r.body)
	}
	f.DrainBlocks, f.DrainErr = false, fmt.Errorf("%w: no quorum", httpapi.ErrUnavailable)
	if r := do(t, srv, "POST", "/v1/drain", ""); r.code != 503 {
		t.Fatalf("drain without quorum: %d %s", r.code, r.body)
	}
}

func TestAPIHealth(t *testing.T) {
	f, srv := serveFake(t, "")
	if r := do(t, srv, "GET", "/healthz", ""); r.code != 200 {
		t.Fatalf("healthz: %d", r.code)
	}
	for _, c := range []struct {
		status string
		code   int
	}{{apitypes.StatusHealthy, 200}, {apitypes.StatusDegraded, 200}, {apitypes.StatusUnhealthy, 503}} {
		f.SetHealth(c.status, "reason for "+c.status)
		r := do(t, srv, "GET", "/readyz", "")
		h := decodeAs[apitypes.Health](t, r)
		if r.code != c.code || h.Status != c.status || len(h.Reasons) != 1 {
			t.Fatalf("readyz %s: %d %s", c.status, r.code, r.body)
		}
	}
}

func TestAPIRecoversFromPanic(t *testing.T) {
	f, srv := serveFake(t, "")
	f.PanicOnStatus = true
	r := do(t, srv, "GET", "/v1/status", "")
	if r.code != 500 || decodeAs[apitypes.ErrorBody](t, r).Error != "internal error" {
		t.Fatalf("panic: %d %s", r.code, r.body)
	}
	// The server still answers.
	if r := do(t, srv, "GET", "/v1/members", ""); r.code != 200 {
		t.Fatalf("after panic: %d", r.code)
	}
}

func serveFakeWithDashboard(t *testing.T) (*httpapitest.Node, *httptest.Server) {
	t.Helper()
	return httpapitest.ServeWith(t, httpapi.Options{})
}

func TestDashboardServed(t *testing.T) {
	_, srv := serveFakeWithDashboard(t)
	r := do(t, srv, "GET", "/", "")
	if r.code != 200 || !strings.Contains(r.body, "shard-grid") {
		t.Fatalf("/: %d %.200s", r.code, r.body)
	}
	for _, p := range []string{"/app.js", "/style.css"} {
		if r := do(t, srv, "GET", p, ""); r.code != 200 || len(r.body) < 100 {
			t.Fatalf("%s: %d", p, r.code)
		}
	}
	if r := do(t, srv, "GET", "/metrics", ""); r.code != 200 || !strings.Contains(r.body, "tenure_shards_owned") {
		t.Fatalf("/metrics: %d", r.code)
	}
}

func TestAPIOwner(t *testing.T) {
	_, srv := serveFake(t, "")
	r := do(t, srv, "GET", "/v1/owner?key=abc", "")
	o := decodeAs[apitypes.Owner](t, r)
	if r.code != 200 || o.Key != "abc" || o.Shard != 3 || o.Owner != "n1" || !o.Valid || o.HTTPAddr != "127.0.0.1:9946" {
		t.Fatalf("owner of abc: %d %s", r.code, r.body)
	}
	// The fake's shard 7 is unowned: no owner, no address.
	r = do(t, srv, "GET", "/v1/owner?key=1234567", "")
	if o := decodeAs[apitypes.Owner](t, r); r.code != 200 || o.Shard != 7 || o.Owner != "" || o.HTTPAddr != "" || o.State != "unowned" {
		t.Fatalf("owner of an unowned shard: %d %s", r.code, r.body)
	}
	if r := do(t, srv, "GET", "/v1/owner", ""); r.code != 400 || !strings.Contains(r.body, "invalid") {
		t.Fatalf("no key: %d %s", r.code, r.body)
	}
	if r := do(t, srv, "POST", "/v1/owner?key=a", ""); r.code != 405 {
		t.Fatalf("POST: %d", r.code)
	}
}

// The embedder's registry gets the tenure_* metrics, and /metrics serves
// everything on it; a second handler on the same registry is refused.
func TestAPIRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	mine := prometheus.NewCounter(prometheus.CounterOpts{Name: "service_requests_total", Help: "x"})
	reg.MustRegister(mine)
	h, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	r := do(t, srv, "GET", "/metrics", "")
	if r.code != 200 || !strings.Contains(r.body, "service_requests_total") || !strings.Contains(r.body, "tenure_shards_owned") {
		t.Fatalf("/metrics: %d %.300s", r.code, r.body)
	}
	if _, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{Registry: reg}); err == nil {
		t.Fatal("a second handler registered on the same registry")
	}
	if _, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{ReadToken: "r"}); err == nil {
		t.Fatal("a read token without a write token accepted")
	}
}

// The dashboard has the panels issue 13 asks for: members from gossip with
// their lease and a suspected state, elections, a jobs list, and each
// move's cause and failover gap. (Its behaviour in a browser is
// cmd/tenure's browser test.)
func TestDashboardPanels(t *testing.T) {
	_, srv := serveFakeWithDashboard(t)
	html := do(t, srv, "GET", "/", "").body
	js := do(t, srv, "GET", "/app.js", "").body
	for _, want := range []string{`id="members"`, "<th>lease</th>", `id="elections"`, `id="jobs-table"`, "<th>cause</th>", "<th>unowned for</th>", `id="shard-grid"`, `id="moves"`} {
		if !strings.Contains(html, want) {
			t.Errorf("index.html lacks %s", want)
		}
	}
	for _, want := range []string{`get("/v1/members")`, "m.suspected", "lease_remaining_ms", "hot_shards", `get("/v1/elections")`, "/v1/jobs?limit=10&state="} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %s", want)
		}
	}
}
