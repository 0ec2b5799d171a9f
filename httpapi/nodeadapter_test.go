package httpapi

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tenurehq/tenure/node"
)

// TestAPIOverMemNodes runs the HTTP API over real node.Nodes on node's
// in-process network: placement, jobs processed by the demo workload's
// job handler, and a drain that shows up in /v1/moves.
func TestAPIOverMemNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	var ads []*nodeAdapter
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := node.DefaultConfig()
		cfg.NodeID, cfg.Network, cfg.Partitions, cfg.Profile = id, net, 16, node.ProfileFast
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ads = append(ads, &nodeAdapter{n: n})
	}
	defer func() {
		for _, a := range ads {
			_ = a.Close(context.Background())
		}
	}()
	for _, a := range ads {
		if err := a.n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	api := newAPI(apiConfig{Node: ads[0]})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); api.Run(runCtx, nil) }()
	defer func() { stop(); <-done }()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	st := decodeAs[statusJSON](t, do(t, srv, "GET", "/v1/status", ""))
	if st.Node != "n1" || len(st.Members) != 3 || st.Partitions != 16 || st.Health.Status == statusUnhealthy {
		t.Fatalf("status: %+v", st)
	}
	shards := decodeAs[[]shardJSON](t, do(t, srv, "GET", "/v1/shards", ""))
	if len(shards) != 16 {
		t.Fatalf("%d shards", len(shards))
	}
	for _, s := range shards {
		if s.State != "owned" || !s.Valid || s.Owner == "" {
			t.Fatalf("unsettled shard %+v", s)
		}
		if s.Acting != (s.Owner == "n1") {
			t.Fatalf("acting here %v for %+v", s.Acting, s)
		}
	}
	if r := do(t, srv, "GET", "/v1/shards/16", ""); r.code != 404 {
		t.Fatalf("shard 16: %d", r.code)
	}
	if r := do(t, srv, "GET", "/readyz", ""); r.code != 200 {
		t.Fatalf("readyz: %d %s", r.code, r.body)
	}

	// A job is processed by whichever node owns its shard.
	r := do(t, srv, "POST", "/v1/jobs", `{"type":"demo","key":"job-1","payload":{"n":1}}`)
	if r.code != 201 {
		t.Fatalf("enqueue: %d %s", r.code, r.body)
	}
	j := decodeAs[jobJSON](t, r)
	waitFor(t, 30*time.Second, "job completed", func() bool {
		for _, a := range ads {
			a.ProcessJobs(ctx)
		}
		got, ok := ads[0].Job(j.ID)
		return ok && got.State == "completed"
	})
	got := decodeAs[jobJSON](t, do(t, srv, "GET", "/v1/jobs/"+j.ID, ""))
	if got.Attempt != 1 || len(got.Result) == 0 {
		t.Fatalf("job: %+v", got)
	}

	// Drain n1 through the API.
	r = do(t, srv, "POST", "/v1/drain?wait=30s", "")
	if d := decodeAs[drainJSON](t, r); r.code != 200 || !d.Done || d.Owned != 0 {
		t.Fatalf("drain: %d %s", r.code, r.body)
	}
	waitFor(t, 30*time.Second, "moves away from n1 recorded", func() bool {
		for _, m := range decodeAs[[]moveJSON](t, do(t, srv, "GET", "/v1/moves", "")) {
			if m.From == "n1" && m.To != "" && m.To != "n1" {
				return true
			}
		}
		return false
	})
	for _, s := range decodeAs[[]shardJSON](t, do(t, srv, "GET", "/v1/shards", "")) {
		if s.Acting {
			t.Fatalf("drained n1 still acts on %+v", s)
		}
	}
}
