package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi"
)

// TestEmbeddedNodeWithClient mounts httpapi on a service's own mux next to
// its own routes, over a real single node on loopback, and drives it with
// package client: status, owner, enqueue (idempotent), get, list with
// pages, auth errors, drain and undrain.
func TestEmbeddedNodeWithClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := startRealNode(t, ctx, nil)
	api, err := httpapi.New(n, httpapi.Options{Token: "w", ReadToken: "r", Version: "embedded"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/app/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hi")) })
	mux.Handle("/", api)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, err := client.New(srv.URL, client.Options{Token: "w"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Node != "n1" || st.Partitions != 4 || st.Owned != 4 || st.Version != "embedded" {
		t.Fatalf("status: %+v %v", st, err)
	}
	if h, ready, err := c.Ready(ctx); err != nil || !ready || h.Status == "unhealthy" {
		t.Fatalf("ready: %+v %v %v", h, ready, err)
	}
	o, err := c.Owner(ctx, "tenant-1")
	if err != nil || o.Owner != "n1" || !o.Valid || o.Shard != n.ShardFor("tenant-1") || o.Epoch == 0 {
		t.Fatalf("owner: %+v %v", o, err)
	}
	if ms, err := c.Members(ctx); err != nil || len(ms) != 1 || ms[0].ID != "n1" {
		t.Fatalf("members: %+v %v", ms, err)
	}
	if ss, err := c.Shards(ctx, client.ShardFilter{Owner: "n1"}); err != nil || len(ss) != 4 {
		t.Fatalf("shards: %d %v", len(ss), err)
	}

	var ids []string
	for _, k := range []string{"a", "b", "c"} {
		j, created, err := c.EnqueueJob(ctx, client.JobRequest{Type: "email", Key: "job-" + k, ShardKey: "tenant-1", Payload: []byte(`{"to":"` + k + `"}`)})
		if err != nil || !created || j.State != "pending" {
			t.Fatalf("enqueue %s: %+v %v %v", k, j, created, err)
		}
		ids = append(ids, j.ID)
	}
	again, created, err := c.EnqueueJob(ctx, client.JobRequest{Type: "email", Key: "job-a", ShardKey: "tenant-1"})
	if err != nil || created || again.ID != ids[0] {
		t.Fatalf("enqueue again: %+v %v %v", again, created, err)
	}
	j, err := c.Job(ctx, ids[1])
	if err != nil || j.Key != "job-b" || string(j.Payload) != `{"to":"b"}` {
		t.Fatalf("job: %+v %v", j, err)
	}
	page, err := c.Jobs(ctx, client.JobFilter{Limit: 2})
	if err != nil || len(page.Jobs) != 2 || page.Next != ids[1] || page.Counts["pending"] != 3 {
		t.Fatalf("jobs page: %+v %v", page, err)
	}
	all, err := c.AllJobs(ctx, client.JobFilter{Limit: 2})
	if err != nil || len(all) != 3 {
		t.Fatalf("all jobs: %d %v", len(all), err)
	}

	// Errors wrap the API's codes.
	if _, err := c.Job(ctx, "999999"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing job: %v", err)
	}
	ro, _ := client.New(srv.URL, client.Options{Token: "r"})
	_, _, err = ro.EnqueueJob(ctx, client.JobRequest{Type: "x", Key: "k"})
	var ae *client.APIError
	if !errors.Is(err, client.ErrForbidden) || !errors.As(err, &ae) || ae.Status != 403 || ae.Code != "forbidden" {
		t.Fatalf("read token enqueue: %v", err)
	}
	anon, _ := client.New(srv.URL, client.Options{})
	if _, err := anon.Status(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("no token: %v", err)
	}
	if _, err := c.Keyring(ctx); !errors.Is(err, client.ErrNotImplemented) {
		t.Fatalf("keyring without gossip encryption: %v", err)
	}

	// A single node has nobody to hand its shards to: the drain answers
	// that it cannot hand over, with the shards it keeps; undrain makes it
	// eligible again.
	d, err := c.Drain(ctx, 300*time.Millisecond)
	if err != nil || !d.Draining || d.Node != "n1" || d.Done || d.OthersEligible || d.Owned == 0 || !strings.Contains(d.Reason, "cannot hand over") {
		t.Fatalf("drain: %+v %v", d, err)
	}
	if d, err := c.Undrain(ctx); err != nil || d.Draining {
		t.Fatalf("undrain: %+v %v", d, err)
	}
	// The service's own routes still answer beside the API.
	resp, err := http.Get(srv.URL + "/app/hello")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("service route: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	resp.Body.Close()
}
