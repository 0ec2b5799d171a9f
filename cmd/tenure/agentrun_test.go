package main

import (
	"context"
	"encoding/json"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRunning is a runningNode over fakeNode for the agent's lifecycle.
type fakeRunning struct {
	*httpapitest.Node
	closed atomic.Bool
	jobs   atomic.Int64
}

func (f *fakeRunning) ID() string { return "n1" }

func (f *fakeRunning) API(o httpapi.Options) (*httpapi.Handler, error) {
	return httpapi.NewWithBackend(f.Node, o)
}

func (f *fakeRunning) Owned() []ownedShard {
	var out []ownedShard
	for _, s := range f.Shards() {
		if s.Acting {
			out = append(out, ownedShard{Shard: s.Shard, Epoch: s.Epoch})
		}
	}
	return out
}

func (f *fakeRunning) ProcessJobs(ctx context.Context) { f.jobs.Add(1) }

func (f *fakeRunning) Close(ctx context.Context) error {
	f.closed.Store(true)
	return f.Drain(ctx)
}

// TestAgentLifecycle runs `tenure agent` in-process over a fake node:
// HTTP comes up, the workload ticks to the witness, and cancelling the
// context (SIGTERM) closes the node and returns cleanly.
func TestAgentLifecycle(t *testing.T) {
	fr := &fakeRunning{Node: httpapitest.NewNode()}
	old := startNode
	startNode = func(ctx context.Context, c agentConfig, log *slog.Logger) (runningNode, error) {
		if c.NodeID != "n1" || c.Profile != "fast" {
			t.Errorf("config: %+v", c)
		}
		return fr, nil
	}
	t.Cleanup(func() { startNode = old })
	checker := newWitnessChecker()
	wsrv := httptest.NewServer(checker)
	defer wsrv.Close()

	var logs syncBuffer
	t.Setenv("TENURE_PROFILE", "fast") // the agent reads TENURE_* from the process environment (ff)
	m := &Main{Stdout: &logs, Stderr: &logs, Getenv: func(k string) string {
		return map[string]string{"HOSTNAME": "n1"}[k]
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, []string{"agent", "--bootstrap-expect", "1", "--http-addr", "127.0.0.1:0",
			"--gossip-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--witness", wsrv.URL, "--tick", "5ms", "--log-format", "json"})
	}()
	var addr string
	waitFor(t, 20*time.Second, "the agent to run", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				HTTP string `json:"http"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "agent running" {
				addr = rec.HTTP
				return true
			}
		}
		return false
	})
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz %d", resp.StatusCode)
	}
	waitFor(t, 20*time.Second, "ticks at the witness and job processing", func() bool {
		return len(checker.ticksOf(0)) >= 3 && fr.jobs.Load() > 0
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop")
	}
	if !fr.closed.Load() {
		t.Fatal("node not closed")
	}
	if !strings.Contains(logs.String(), "agent stopped") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

func TestAgentStartingHandler(t *testing.T) {
	srv := httptest.NewServer(httpapi.StartingHandler(httpapi.Options{Registry: newAgentMetrics().reg}))
	defer srv.Close()
	for path, code := range map[string]int{"/healthz": 200, "/readyz": 503, "/v1/status": 503, "/metrics": 200} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, code)
		}
	}
}
