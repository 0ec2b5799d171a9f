package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
)

// EnqueueJob generates one Idempotency-Key per call and sends it on every
// retry of that call; a new call gets a new key. A keyless enqueue is
// retried only once the server has echoed a key (it deduplicates by
// request id); a keyed one always.
func TestEnqueueIdempotencyKeyReusedOnRetries(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	fail := 0 // the next fail requests answer 503
	echo := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.Header().Set("Content-Type", "application/json")
		if echo {
			w.Header().Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
		}
		if fail > 0 {
			fail--
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":"no quorum"}`))
			return
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"1"}`))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.Options{Backoff: time.Millisecond, Retries: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reset := func(f int, e bool) { mu.Lock(); keys, fail, echo = nil, f, e; mu.Unlock() }
	sent := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), keys...) }

	// A keyless enqueue against a server that never echoed: sent once.
	reset(2, false)
	if _, _, err := c.EnqueueJob(ctx, client.JobRequest{Type: "t", ShardKey: "s"}); err == nil {
		t.Fatal("a keyless enqueue was retried against a server that ignores keys")
	}
	if k := sent(); len(k) != 1 || len(k[0]) != 32 {
		t.Fatalf("sent %q, want one generated key", k)
	}
	// A keyed enqueue: retried, with one key on every try.
	reset(2, false)
	if _, created, err := c.EnqueueJob(ctx, client.JobRequest{Type: "t", Key: "k"}); err != nil || !created {
		t.Fatal(err, created)
	}
	k := sent()
	if len(k) != 3 || k[0] != k[1] || k[1] != k[2] || k[0] == "" {
		t.Fatalf("keys on the tries of one call: %q", k)
	}
	first := k[0]
	// The server echoes: from then on keyless enqueues are retried too.
	reset(0, true)
	if _, _, err := c.EnqueueJob(ctx, client.JobRequest{Type: "t", ShardKey: "s"}); err != nil {
		t.Fatal(err)
	}
	if k := sent(); len(k) != 1 || k[0] == first {
		t.Fatalf("a new call reused the previous call's key: %q", k)
	}
	reset(2, true)
	if _, _, err := c.EnqueueJob(ctx, client.JobRequest{Type: "t", ShardKey: "s"}, client.WithIdempotencyKey("order-7")); err != nil {
		t.Fatal(err)
	}
	if k := sent(); len(k) != 3 || k[0] != "order-7" || k[2] != "order-7" {
		t.Fatalf("explicit key on retries: %q", k)
	}
}
