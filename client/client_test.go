package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
)

// Idempotent calls retry 503s; POSTs without an idempotency key do not;
// errors match the sentinels.
func TestRetriesAndErrors(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/status" && n < 3:
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":"no quorum"}`))
		case r.URL.Path == "/v1/status":
			_, _ = w.Write([]byte(`{"node":"n1"}`))
		case r.URL.Path == "/v1/jobs":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":"full","code":"queue_full"}`))
		default:
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":"no quorum"}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.Options{Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil || st.Node != "n1" || calls.Load() != 3 {
		t.Fatalf("status after two 503s: %+v %v (%d calls)", st, err, calls.Load())
	}
	calls.Store(0)
	_, _, err = c.EnqueueJob(ctx, client.JobRequest{Type: "t"})
	var ae *client.APIError
	if !errors.Is(err, client.ErrQueueFull) || !errors.As(err, &ae) || ae.RetryAfter != time.Second || calls.Load() != 1 {
		t.Fatalf("enqueue: %v (%d calls)", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.FinalizeUpgrade(ctx); !errors.Is(err, client.ErrUnavailable) || calls.Load() != 1 {
		t.Fatalf("finalize is not retried: %v (%d calls)", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.Members(ctx); !errors.Is(err, client.ErrUnavailable) || calls.Load() != 1+client.DefaultRetries {
		t.Fatalf("members: %v (%d calls)", err, calls.Load())
	}
	srv.Close()
	if _, err := c.Status(ctx); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("closed server: %v", err)
	}
	if _, err := client.New("ftp://x", client.Options{}); err == nil {
		t.Fatal("ftp:// accepted")
	}
}

// Lists follow the X-Next-After cursor to the end.
func TestMembersPages(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("after") == "" {
			w.Header().Set("X-Next-After", "a")
			_, _ = w.Write([]byte(`[{"id":"a"}]`))
			return
		}
		_, _ = w.Write([]byte(`[{"id":"b"}]`))
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL, client.Options{})
	ms, err := c.Members(context.Background())
	if err != nil || len(ms) != 2 || ms[1].ID != "b" {
		t.Fatalf("%+v %v", ms, err)
	}
}
