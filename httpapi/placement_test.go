package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
)

// placementFake adds the placement rules to the fake node, one Func field
// per method.
type placementFake struct {
	*httpapitest.Node
	RulesFunc   func() (apitypes.PlacementRules, error)
	PinFunc     func(apitypes.PinRequest) error
	ExcludeFunc func(apitypes.ExcludeRequest) error
}

var _ httpapi.PlacementBackend = (*placementFake)(nil)

func (f *placementFake) PlacementRules() (apitypes.PlacementRules, error) { return f.RulesFunc() }
func (f *placementFake) Pin(_ context.Context, r apitypes.PinRequest) error {
	return f.PinFunc(r)
}
func (f *placementFake) Exclude(_ context.Context, r apitypes.ExcludeRequest) error {
	return f.ExcludeFunc(r)
}

func TestAPIPlacementRules(t *testing.T) {
	var rules apitypes.PlacementRules
	inactive := true
	f := &placementFake{Node: httpapitest.NewNode()}
	f.RulesFunc = func() (apitypes.PlacementRules, error) { return rules, nil }
	f.PinFunc = func(r apitypes.PinRequest) error {
		switch {
		case inactive:
			return fmt.Errorf("%w: needs cluster version 3", httpapi.ErrConflict)
		case r.Node == "nobody":
			return fmt.Errorf("%w: unknown node", httpapi.ErrBadInput)
		}
		rules.Pins = append(rules.Pins, apitypes.Pin{Shard: r.Shard, Node: r.Node, Reason: r.Reason})
		return nil
	}
	f.ExcludeFunc = func(r apitypes.ExcludeRequest) error {
		rules.Excluded = append(rules.Excluded, apitypes.Exclusion{Node: r.Node})
		return nil
	}
	h, err := httpapi.NewWithBackend(f, httpapi.Options{Token: "w", ReadToken: "r"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); _ = h.Close() })
	w, r := []string{"Authorization", "Bearer w"}, []string{"Authorization", "Bearer r"}

	if rp := do(t, srv, "POST", "/v1/placement/pin", `{"shard":1,"node":"n1"}`, r...); rp.code != http.StatusForbidden {
		t.Fatalf("pin with the read token: %d %s", rp.code, rp.body)
	}
	if rp := do(t, srv, "POST", "/v1/placement/pin", `{"shard":1,"node":"n1"}`, w...); rp.code != http.StatusConflict {
		t.Fatalf("pin before version 3: %d %s", rp.code, rp.body)
	}
	inactive = false
	for _, c := range []struct {
		path, body string
		code       int
	}{
		{"/v1/placement/pin", `{"shard":1,"node":"nobody"}`, 400},
		{"/v1/placement/pin", `{"shard":-1,"node":"n1"}`, 400},
		{"/v1/placement/pin", `{"shard":1,"node":"n1","extra":1}`, 400},
		{"/v1/placement/exclude", `{"node":"","exclude":true}`, 400},
		{"/v1/placement/pin", `{"shard":1,"node":"n1","reason":"hot"}`, 200},
		{"/v1/placement/exclude", `{"node":"n2","exclude":true}`, 200},
	} {
		if rp := do(t, srv, "POST", c.path, c.body, w...); rp.code != c.code {
			t.Fatalf("POST %s %s: %d %s, want %d", c.path, c.body, rp.code, rp.body, c.code)
		}
	}
	got := decodeAs[apitypes.PlacementRules](t, func() reply {
		rp := do(t, srv, "GET", "/v1/placement", "", r...)
		return rp
	}())
	if len(got.Pins) != 1 || got.Pins[0].Node != "n1" || got.Pins[0].Reason != "hot" || len(got.Excluded) != 1 {
		t.Fatalf("rules %+v", got)
	}
	// Without the optional backend: 501.
	_, plain := httpapitest.Serve(t, "")
	if rp := do(t, plain, "GET", "/v1/placement", ""); rp.code != http.StatusNotImplemented {
		t.Fatalf("GET /v1/placement on a backend without rules: %d", rp.code)
	}
}
