package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
)

type fencedFake struct {
	*httpapitest.Node
	policy   apitypes.FencedPolicy
	inactive bool
}

var _ httpapi.FencedBackend = (*fencedFake)(nil)

func (f *fencedFake) FencedPolicy() (apitypes.FencedPolicy, error) { return f.policy, nil }
func (f *fencedFake) SetFenced(_ context.Context, r apitypes.FencedRequest) error {
	switch {
	case f.inactive:
		return fmt.Errorf("%w: needs cluster version 4", httpapi.ErrConflict)
	case r.Last >= 100:
		return fmt.Errorf("%w: no such shard", httpapi.ErrBadInput)
	}
	f.policy.Ranges = append(f.policy.Ranges, apitypes.FencedRange{First: r.First, Last: r.Last})
	return nil
}

// TestAPIFenced: POST /v1/fenced needs the write token, answers 409 before
// version 4 and 400 for a bad range; GET lists the policy; a node without
// the policy answers 501.
func TestAPIFenced(t *testing.T) {
	f := &fencedFake{Node: httpapitest.NewNode(), policy: apitypes.FencedPolicy{Ranges: []apitypes.FencedRange{}}, inactive: true}
	h, err := httpapi.NewWithBackend(f, httpapi.Options{Token: "w", ReadToken: "r"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); _ = h.Close() })
	w, r := []string{"Authorization", "Bearer w"}, []string{"Authorization", "Bearer r"}
	if rp := do(t, srv, "POST", "/v1/fenced", `{"first":0,"last":7,"fenced":true}`, r...); rp.code != http.StatusForbidden {
		t.Fatalf("set with the read token: %d %s", rp.code, rp.body)
	}
	if rp := do(t, srv, "POST", "/v1/fenced", `{"first":0,"last":7,"fenced":true}`, w...); rp.code != http.StatusConflict {
		t.Fatalf("set before version 4: %d %s", rp.code, rp.body)
	}
	f.inactive = false
	for _, c := range []struct {
		body string
		code int
	}{
		{`{"first":7,"last":0,"fenced":true}`, http.StatusBadRequest},
		{`{"first":0,"last":100,"fenced":true}`, http.StatusBadRequest},
		{`{"first":0,"last":7,"fenced":true}`, http.StatusOK},
	} {
		if rp := do(t, srv, "POST", "/v1/fenced", c.body, w...); rp.code != c.code {
			t.Fatalf("POST %s: %d %s, want %d", c.body, rp.code, rp.body, c.code)
		}
	}
	rp := do(t, srv, "GET", "/v1/fenced", "", r...)
	if rp.code != http.StatusOK || !strings.Contains(rp.body, `"ranges":[{"first":0,"last":7}]`) {
		t.Fatalf("GET: %d %s", rp.code, rp.body)
	}

	plain, err := httpapi.NewWithBackend(httpapitest.NewNode(), httpapi.Options{Token: "w"})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(plain)
	t.Cleanup(func() { srv2.Close(); _ = plain.Close() })
	if rp := do(t, srv2, "GET", "/v1/fenced", "", "Authorization", "Bearer w"); rp.code != http.StatusNotImplemented {
		t.Fatalf("GET on a node without the policy: %d %s", rp.code, rp.body)
	}
}
