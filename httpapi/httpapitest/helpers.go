package httpapitest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi"
)

// Serve starts the API over a new fake with the write token (none when
// empty) and a 200ms drain wait, and waits until it records moves.
func Serve(t testing.TB, token string) (*Node, *httptest.Server) {
	t.Helper()
	return ServeWith(t, httpapi.Options{Token: token, DrainWait: 200 * time.Millisecond})
}

// ServeWith is Serve with options.
func ServeWith(t testing.TB, o httpapi.Options) (*Node, *httptest.Server) {
	t.Helper()
	f := NewNode()
	h, err := httpapi.NewWithBackend(f, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); _ = h.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for f.Subscribers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the API did not subscribe to ownership events")
		}
		time.Sleep(time.Millisecond)
	}
	return f, srv
}

// Reply is an HTTP answer.
type Reply struct {
	Code int
	Body string
	Hdr  http.Header
}

// Do sends a request to srv with the body (none when empty) and header
// pairs. A request other than GET and HEAD carries Content-Type:
// application/json, as the tenure client sends it, unless a pair sets it
// (an empty value removes a header).
func Do(t testing.TB, srv *httptest.Server, method, path, body string, hdr ...string) Reply {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet && method != http.MethodHead {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{resp.StatusCode, string(b), resp.Header}
}

// DecodeAs decodes r's body as a T.
func DecodeAs[T any](t testing.TB, r Reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.Body), &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, r.Body, err)
	}
	return v
}
