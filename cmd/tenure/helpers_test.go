package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
)

// newFakeAPI is the API over f; it closes with the test.
func newFakeAPI(t *testing.T, f *httpapitest.Node, o httpapi.Options) *httpapi.Handler {
	t.Helper()
	h, err := httpapi.NewWithBackend(f, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// nodeAPI is the API over a started node; it closes with the test.
func nodeAPI(t *testing.T, n runningNode) *httpapi.Handler {
	t.Helper()
	h, err := n.API(httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serveFake serves the API over httpapitest's node with the write token (none
// when empty).
func serveFake(t *testing.T, token string) (*httpapitest.Node, *httptest.Server) {
	t.Helper()
	return httpapitest.Serve(t, token)
}

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

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
