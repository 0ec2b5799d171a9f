package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi/httpapitest"
)

type reply struct {
	code int
	body string
	hdr  http.Header
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr ...string) reply {
	t.Helper()
	r := httpapitest.Do(t, srv, method, path, body, hdr...)
	return reply{r.Code, r.Body, r.Hdr}
}

func decodeAs[T any](t *testing.T, r reply) T {
	t.Helper()
	return httpapitest.DecodeAs[T](t, httpapitest.Reply{Code: r.code, Body: r.body, Hdr: r.hdr})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
