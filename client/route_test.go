package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Route looks the owner up, sends the request there with its token, and on
// a 421 (moved) looks up again and resends the body once.
func TestRouteRetriesOnceAfterAMove(t *testing.T) {
	var bodies []string
	owner := func(code int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, fmt.Sprintf("%d %s %s %s", code, r.URL.Path, r.Header.Get(apitypes.HeaderToken), b))
			w.WriteHeader(code)
		}))
	}
	old, cur := owner(http.StatusMisdirectedRequest), owner(http.StatusOK)
	defer old.Close()
	defer cur.Close()
	var lookups atomic.Int32
	var answer func() apitypes.Owner
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/owner" || r.URL.Query().Get("key") != "t1" {
			http.NotFound(w, r)
			return
		}
		lookups.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer())
	}))
	defer api.Close()
	c, err := client.New(api.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	answer = func() apitypes.Owner {
		o := apitypes.Owner{Key: "t1", Shard: 3, Owner: "a", Epoch: 4, State: "owned", Valid: true, HTTPAddr: strings.TrimPrefix(old.URL, "http://")}
		if lookups.Load() > 1 {
			o.Owner, o.Epoch, o.HTTPAddr = "b", 5, strings.TrimPrefix(cur.URL, "http://")
		}
		return o
	}
	req, _ := http.NewRequest("POST", "/orders/t1", strings.NewReader("order"))
	resp, err := c.Route(t.Context(), "t1", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []string{"421 /orders/t1 3/4 order", "200 /orders/t1 3/5 order"}
	if resp.StatusCode != 200 || fmt.Sprint(bodies) != fmt.Sprint(want) {
		t.Fatalf("Route: %d, requests %q, want %q", resp.StatusCode, bodies, want)
	}

	// No valid owner, or no address: ErrNoOwner, nothing sent.
	bodies = nil
	for _, o := range []apitypes.Owner{
		{Key: "t1", Shard: 3, State: "unowned"},
		{Key: "t1", Shard: 3, Owner: "a", Epoch: 4, State: "owned", Valid: false, HTTPAddr: "127.0.0.1:1"},
		{Key: "t1", Shard: 3, Owner: "a", Epoch: 4, State: "owned", Valid: true},
	} {
		answer = func() apitypes.Owner { return o }
		req, _ := http.NewRequest("GET", "/orders/t1", nil)
		if _, err := c.Route(t.Context(), "t1", req); !errors.Is(err, client.ErrNoOwner) {
			t.Errorf("owner %+v: %v, want ErrNoOwner", o, err)
		}
	}
	if len(bodies) != 0 {
		t.Fatalf("sent without an owner: %q", bodies)
	}
}
