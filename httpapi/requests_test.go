package httpapi_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Over a real single-node cluster at version 5: an Idempotency-Key makes a
// retried POST /v1/jobs answer the first try (201 with the same job for a
// keyless job, the key echoed), the key with another body answers 422, a
// malformed key 400; ?consistent=true serves reads after a read barrier,
// and a bad value answers 400. The client generates a key per call.
func TestRealNodeIdempotencyKeyAndConsistentReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := startRealNode(t, ctx, nil)
	a, err := httpapi.New(n, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := httptest.NewServer(a)
	defer srv.Close()

	// Version 5 is finalized shortly after the start.
	waitFor(t, 30*time.Second, "consistent reads offered", func() bool {
		return do(t, srv, "GET", "/v1/jobs?consistent=true", "").code == 200
	})
	body := `{"type":"mail","shard_key":"tenant","payload":{"to":"a"}}`
	first := do(t, srv, "POST", "/v1/jobs", body, "Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	if first.code != 201 || first.hdr.Get("Idempotency-Key") == "" {
		t.Fatalf("first: %d %s (echo %q)", first.code, first.body, first.hdr.Get("Idempotency-Key"))
	}
	// The bare form of the same key is the same key.
	again := do(t, srv, "POST", "/v1/jobs", body, "Idempotency-Key", `8e03978e-40d5-43e8-bc93-6894a57f9324`)
	j1, j2 := decodeAs[apitypes.Job](t, first), decodeAs[apitypes.Job](t, again)
	if again.code != 201 || j1.ID != j2.ID {
		t.Fatalf("retry: %d job %s, want 201 and job %s", again.code, j2.ID, j1.ID)
	}
	other := do(t, srv, "POST", "/v1/jobs", `{"type":"mail","shard_key":"tenant","payload":{"to":"b"}}`, "Idempotency-Key", `8e03978e-40d5-43e8-bc93-6894a57f9324`)
	if other.code != 422 || !strings.Contains(other.body, "idempotency_key_reused") {
		t.Fatalf("another body with the key: %d %s", other.code, other.body)
	}
	for _, bad := range []string{`""`, strings.Repeat("k", 256), "caf\xc3\xa9", `"unterminated`} {
		if r := do(t, srv, "POST", "/v1/jobs", body, "Idempotency-Key", bad); r.code != 400 {
			t.Errorf("Idempotency-Key %.20q: %d %s, want 400", bad, r.code, r.body)
		}
	}
	if r := do(t, srv, "GET", "/v1/jobs/"+j1.ID+"?consistent=true", ""); r.code != 200 || decodeAs[apitypes.Job](t, r).ID != j1.ID {
		t.Fatalf("consistent get: %d %s", r.code, r.body)
	}
	if r := do(t, srv, "GET", "/v1/jobs/"+j1.ID+"?consistent=maybe", ""); r.code != 400 {
		t.Fatalf("consistent=maybe: %d %s", r.code, r.body)
	}
	if r := do(t, srv, "GET", "/v1/jobs?consistent=true", ""); r.code != 200 || len(decodeAs[apitypes.JobList](t, r).Jobs) != 1 || r.hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("consistent list: %d %s", r.code, r.body)
	}

	// The client: one generated key per call (two calls, two jobs), an
	// explicit key reused across calls (one job, created both times),
	// ErrKeyReused for another body.
	c, err := client.New(srv.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := apitypes.JobRequest{Type: "t", ShardKey: "tenant"}
	x, cx, err := c.EnqueueJob(ctx, req)
	y, cy, err2 := c.EnqueueJob(ctx, req)
	if err != nil || err2 != nil || !cx || !cy || x.ID == y.ID {
		t.Fatalf("two calls without a key: %v %v, jobs %s %s", err, err2, x.ID, y.ID)
	}
	key := client.NewIdempotencyKey()
	p, cp, err := c.EnqueueJob(ctx, req, client.WithIdempotencyKey(key))
	q, cq, err2 := c.EnqueueJob(ctx, req, client.WithIdempotencyKey(key))
	if err != nil || err2 != nil || !cp || !cq || p.ID != q.ID {
		t.Fatalf("one key twice: %v %v, jobs %s (created %v) %s (created %v)", err, err2, p.ID, cp, q.ID, cq)
	}
	req.Type = "u"
	if _, _, err := c.EnqueueJob(ctx, req, client.WithIdempotencyKey(key)); !errors.Is(err, client.ErrKeyReused) {
		t.Fatalf("another body with the key: %v, want ErrKeyReused", err)
	}
	if _, err := c.Job(ctx, p.ID, client.Consistent()); err != nil {
		t.Fatal(err)
	}
}
