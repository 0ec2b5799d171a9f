package httpapi_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// TestAPIOverMemNodes runs the HTTP API over real node.Nodes on node's
// in-process network: placement, jobs processed by the demo workload's
// job handler, and a drain that shows up in /v1/moves.
func TestAPIOverMemNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	var ns []*node.Node
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := node.DefaultConfig()
		cfg.NodeID, cfg.Network, cfg.Partitions, cfg.Profile = id, net, 16, node.ProfileFast
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ns = append(ns, n)
	}
	defer func() {
		for _, n := range ns {
			_ = n.Close(context.Background())
		}
	}()
	for _, n := range ns {
		if err := n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	api, err := httpapi.New(ns[0], httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	srv := httptest.NewServer(api)
	defer srv.Close()

	// Health is a lease that a loaded machine can let lapse for a moment
	// (fast profile: 800 ms): wait for a healthy answer with a deadline
	// rather than judging one sample.
	var st apitypes.Status
	for {
		st = decodeAs[apitypes.Status](t, do(t, srv, "GET", "/v1/status", ""))
		if st.Node != "n1" || len(st.Members) != 3 || st.Partitions != 16 {
			t.Fatalf("status: %+v", st)
		}
		if st.Health.Status != apitypes.StatusUnhealthy {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status never healthy: %+v", st)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	shards := decodeAs[[]apitypes.Shard](t, do(t, srv, "GET", "/v1/shards", ""))
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
	j := decodeAs[apitypes.Job](t, r)
	waitFor(t, 30*time.Second, "job completed", func() bool {
		for _, n := range ns {
			processJobs(ctx, n)
		}
		got, ok := httpapi.Adapt(ns[0]).Job(j.ID)
		return ok && got.State == "completed"
	})
	got := decodeAs[apitypes.Job](t, do(t, srv, "GET", "/v1/jobs/"+j.ID, ""))
	if got.Attempt != 1 || len(got.Result) == 0 {
		t.Fatalf("job: %+v", got)
	}

	// Drain n1 through the API.
	r = do(t, srv, "POST", "/v1/drain?wait=30s", "")
	if d := decodeAs[apitypes.Drain](t, r); r.code != 200 || !d.Done || d.Owned != 0 {
		t.Fatalf("drain: %d %s", r.code, r.body)
	}
	waitFor(t, 30*time.Second, "moves away from n1 recorded", func() bool {
		for _, m := range decodeAs[[]apitypes.Move](t, do(t, srv, "GET", "/v1/moves", "")) {
			if m.From == "n1" && m.To != "" && m.To != "n1" {
				return true
			}
		}
		return false
	})
	for _, s := range decodeAs[[]apitypes.Shard](t, do(t, srv, "GET", "/v1/shards", "")) {
		if s.Acting {
			t.Fatalf("drained n1 still acts on %+v", s)
		}
	}
}

// processJobs starts and completes the runnable jobs of the shards n acts
// on, fenced by the shard's token.
func processJobs(ctx context.Context, n *node.Node) {
	for _, tok := range n.Owned() {
		for _, j := range n.RunnableJobs(tok.Shard) {
			started, err := n.StartJob(ctx, tok, j)
			if err != nil {
				continue
			}
			_, _ = n.CompleteJob(ctx, started, []byte(`{"done_by":"`+n.ID()+`"}`))
		}
	}
}
