package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/node"
)

// startRealNode starts a single-node cluster on loopback (fast profile, 4
// shards) and waits until it owns every shard; it closes with the test.
func startRealNode(t *testing.T, ctx context.Context, mutate func(*node.Config)) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.BootstrapExpect, cfg.DataDir, cfg.Profile, cfg.Partitions = "n1", 1, t.TempDir(), node.ProfileFast, 4
	cfg.GossipAddr, cfg.RaftAddr = freePort(t), freePort(t)
	cfg.Logger = slog.New(slog.DiscardHandler)
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Close(cctx)
	})
	if err := n.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Over a real single-node cluster: a 4,097-byte key answers 400 at once
// (issue #12: it hung, retried as "no quorum"), as does one the API lets
// through to the node, and the pending cap answers 429.
func TestRealNodeEnqueueLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := startRealNode(t, ctx, func(c *node.Config) { c.MaxPendingJobs = 2 })
	a, err := httpapi.New(n, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := httptest.NewServer(a)
	defer srv.Close()

	long := strings.Repeat("k", ledger.MaxStringLen+1)
	start := time.Now()
	r := do(t, srv, "POST", "/v1/jobs", fmt.Sprintf(`{"type":"x","key":%q}`, long))
	if r.code != 400 || time.Since(start) > 5*time.Second {
		t.Fatalf("4097-byte key: %d %.200s after %v", r.code, r.body, time.Since(start))
	}
	// Behind the API's own check, the node answers the same way.
	start = time.Now()
	_, _, err = httpapi.Adapt(n).EnqueueJob(ctx, apitypes.JobRequest{Key: long, Type: "x"})
	if err == nil || !strings.Contains(err.Error(), "4097") || time.Since(start) > 5*time.Second {
		t.Fatalf("node enqueue of a 4097-byte key: %v after %v", err, time.Since(start))
	}
	rec := httptest.NewRecorder()
	httpapi.WriteNodeError(rec, err)
	if rec.Code != 400 {
		t.Fatalf("node's refusal maps to %d", rec.Code)
	}
	for i := range 2 {
		if r := do(t, srv, "POST", "/v1/jobs", fmt.Sprintf(`{"type":"x","key":"j%d","shard_key":"tenant"}`, i)); r.code != 201 {
			t.Fatalf("enqueue %d: %d %s", i, r.code, r.body)
		}
	}
	if r := do(t, srv, "POST", "/v1/jobs", `{"type":"x","key":"j2","shard_key":"tenant"}`); r.code != 429 || !strings.Contains(r.body, "queue_full") {
		t.Fatalf("enqueue on a full shard: %d %s", r.code, r.body)
	}
}

// Over a real single-node cluster: /v1/shards and /v1/shards/{id} say
// which shards are under fenced takeover, from the committed policy.
func TestRealNodeShardsFenced(t *testing.T) {
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

	fenced := func() []bool {
		var out []bool
		for _, s := range decodeAs[[]apitypes.Shard](t, do(t, srv, "GET", "/v1/shards", "")) {
			out = append(out, s.Fenced)
		}
		return out
	}
	if got := fenced(); fmt.Sprint(got) != "[false false false false]" {
		t.Fatalf("fenced before any policy: %v", got)
	}
	// The cluster version that has fenced takeover is finalized shortly
	// after the start.
	waitFor(t, 30*time.Second, "fenced takeover committed", func() bool {
		return n.SetFencedTakeover(ctx, 1, 2, true) == nil
	})
	if got := fenced(); fmt.Sprint(got) != "[false true true false]" {
		t.Fatalf("fenced after putting shards 1-2 under it: %v", got)
	}
	if s := decodeAs[apitypes.Shard](t, do(t, srv, "GET", "/v1/shards/2", "")); !s.Fenced {
		t.Fatalf("/v1/shards/2 = %+v, want fenced", s)
	}
	if s := decodeAs[apitypes.Shard](t, do(t, srv, "GET", "/v1/shards/3", "")); s.Fenced {
		t.Fatalf("/v1/shards/3 = %+v, want not fenced", s)
	}
}
