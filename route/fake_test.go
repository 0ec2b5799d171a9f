package route_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
	"github.com/tenurehq/tenure/route"
)

// fakeNode is a route.Node with one Func field per method.
type fakeNode struct {
	id            string
	TokenFunc     func(uint32) (node.Token, error)
	ShardFunc     func(uint32) node.ShardInfo
	OwnerAddrFunc func(string) (string, node.Token, error)
}

var _ route.Node = (*fakeNode)(nil)

func (f *fakeNode) ID() string                                     { return f.id }
func (f *fakeNode) ShardFor(key string) uint32                     { return node.ShardFor(8, key) }
func (f *fakeNode) Token(s uint32) (node.Token, error)             { return f.TokenFunc(s) }
func (f *fakeNode) Shard(s uint32) node.ShardInfo                  { return f.ShardFunc(s) }
func (f *fakeNode) OwnerAddr(k string) (string, node.Token, error) { return f.OwnerAddrFunc(k) }

// notActing is a node that acts on nothing and knows owner at addr.
func notActing(owner, addr string, epoch uint64) *fakeNode {
	return &fakeNode{
		id:        "me",
		TokenFunc: func(s uint32) (node.Token, error) { return node.Token{}, node.ErrNotOwner },
		ShardFunc: func(s uint32) node.ShardInfo {
			return node.ShardInfo{Shard: s, Epoch: epoch, Owner: owner, State: node.ShardOwned, Valid: true}
		},
		OwnerAddrFunc: func(k string) (string, node.Token, error) {
			if addr == "" {
				return "", node.Token{}, node.ErrNoOwner
			}
			return addr, node.Token{Shard: node.ShardFor(8, k), Epoch: epoch}, nil
		},
	}
}

func mw(t *testing.T, n route.Node, o route.Options) http.Handler {
	t.Helper()
	if o.Key == nil {
		o.Key = func(r *http.Request) (string, error) { return r.URL.Query().Get("key"), nil }
	}
	h, err := route.New(n, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := route.TokenFrom(r.Context())
		fmt.Fprintf(w, "local %s", tok)
	}), o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func routeErr(t *testing.T, rec *httptest.ResponseRecorder) apitypes.RouteError {
	t.Helper()
	var e apitypes.RouteError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("answer %d is not a route error: %q", rec.Code, rec.Body.String())
	}
	return e
}

func TestOptionsValidate(t *testing.T) {
	if _, err := route.New(notActing("o", "", 1), http.NotFoundHandler(), route.Options{}); !errors.Is(err, route.ErrInvalidOptions) || !strings.Contains(err.Error(), "Key") {
		t.Fatalf("no Key: %v", err)
	}
	key := func(*http.Request) (string, error) { return "k", nil }
	if _, err := route.New(notActing("o", "", 1), http.NotFoundHandler(), route.Options{Key: key, Scheme: "ftp", MaxBody: -1}); !errors.Is(err, route.ErrInvalidOptions) || !strings.Contains(err.Error(), "ftp") || !strings.Contains(err.Error(), "MaxBody") {
		t.Fatalf("bad scheme and body: %v", err)
	}
	if _, err := route.New(nil, http.NotFoundHandler(), route.Options{Key: key}); !errors.Is(err, route.ErrInvalidOptions) {
		t.Fatalf("nil node: %v", err)
	}
}

func TestRouteNoOwnerAnswers503(t *testing.T) {
	for _, c := range []struct {
		name string
		n    *fakeNode
	}{
		{"no owner", notActing("", "", 0)},
		{"committed here, not acting", notActing("me", "127.0.0.1:1", 3)},
	} {
		rec := httptest.NewRecorder()
		mw(t, c.n, route.Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "/?key=k", nil))
		e := routeErr(t, rec)
		if rec.Code != 503 || e.Code != apitypes.RouteNoOwner || rec.Header().Get("Retry-After") != "1" || rec.Header().Get(apitypes.HeaderServedBy) != "me" {
			t.Errorf("%s: %d %+v %v", c.name, rec.Code, e, rec.Header())
		}
	}
}

func TestRouteBadKey(t *testing.T) {
	n := notActing("o", "", 1)
	for name, key := range map[string]route.KeyFunc{
		"error": func(*http.Request) (string, error) { return "", errors.New("no tenant in the path") },
		"empty": func(*http.Request) (string, error) { return "", nil },
		"huge":  func(*http.Request) (string, error) { return strings.Repeat("k", 5000), nil },
	} {
		rec := httptest.NewRecorder()
		mw(t, n, route.Options{Key: key}).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if e := routeErr(t, rec); rec.Code != 400 || e.Code != apitypes.RouteBadRequest {
			t.Errorf("%s: %d %+v", name, rec.Code, e)
		}
	}
}

// A forward carries the token and the marker, the body and the caller's
// method, path and query, and passes the owner's answer back.
func TestRouteForwardsOnce(t *testing.T) {
	var got *http.Request
	var gotBody string
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("X-App", "yes")
		w.WriteHeader(201)
		fmt.Fprint(w, "owner answered")
	}))
	defer owner.Close()
	n := notActing("o", strings.TrimPrefix(owner.URL, "http://"), 7)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("PUT", "/orders?key=tenant-1&x=2", strings.NewReader("payload"))
	req.Header.Set("Connection", "X-Drop")
	req.Header.Set("X-Drop", "hop")
	mw(t, n, route.Options{}).ServeHTTP(rec, req)
	if rec.Code != 201 || rec.Body.String() != "owner answered" || rec.Header().Get("X-App") != "yes" {
		t.Fatalf("answer: %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	want := apitypes.FormatRouteToken(node.ShardFor(8, "tenant-1"), 7)
	if got.Method != "PUT" || got.URL.Path != "/orders" || got.URL.Query().Get("x") != "2" || gotBody != "payload" ||
		got.Header.Get(apitypes.HeaderToken) != want || got.Header.Get(apitypes.HeaderForwarded) != "me" ||
		got.Header.Get("X-Forwarded-For") == "" || got.Header.Get("X-Drop") != "" {
		t.Fatalf("forwarded request: %s %s body %q headers %v", got.Method, got.URL, gotBody, got.Header)
	}
}

func TestRouteForwardFailures(t *testing.T) {
	// Nothing listens: refused at once.
	ln := httptest.NewServer(http.NotFoundHandler())
	dead := strings.TrimPrefix(ln.URL, "http://")
	ln.Close()
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(block)
	for _, c := range []struct {
		name string
		addr string
	}{
		{"unreachable", dead},
		{"slower than Timeout", strings.TrimPrefix(slow.URL, "http://")},
	} {
		rec := httptest.NewRecorder()
		start := time.Now()
		mw(t, notActing("o", c.addr, 2), route.Options{Timeout: 300 * time.Millisecond}).ServeHTTP(rec, httptest.NewRequest("GET", "/?key=k", nil))
		e := routeErr(t, rec)
		if rec.Code != 503 || e.Code != apitypes.RouteNoOwner || !strings.Contains(e.Error, c.addr) || time.Since(start) > 5*time.Second {
			t.Errorf("%s: %d %+v after %v", c.name, rec.Code, e, time.Since(start))
		}
	}
	// A body over MaxBody without a Content-Length is refused too.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/?key=k", io.NopCloser(strings.NewReader(strings.Repeat("x", 100))))
	req.ContentLength = -1
	mw(t, notActing("o", dead, 2), route.Options{MaxBody: 10}).ServeHTTP(rec, req)
	if e := routeErr(t, rec); rec.Code != 413 || e.Code != apitypes.RouteTooLarge {
		t.Errorf("chunked body over MaxBody: %d %+v", rec.Code, e)
	}
}
