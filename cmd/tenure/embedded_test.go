package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/node"
)

// TestCLIAgainstEmbeddedService runs the tenure CLI against a service that
// embeds a node (not `tenure agent`) and mounts httpapi on its own mux.
func TestCLIAgainstEmbeddedService(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.BootstrapExpect, cfg.DataDir, cfg.Profile, cfg.Partitions = "svc1", 1, t.TempDir(), node.ProfileFast, 4
	cfg.GossipAddr, cfg.RaftAddr = freePort(t), freePort(t)
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	if err := n.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(n, httpapi.Options{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle("/", api)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	env := map[string]string{"TENURE_ADDR": srv.URL, "TENURE_TOKEN": "tok"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "svc1 (group"},
		{[]string{"shards", "--owner", "svc1"}, "svc1"},
		{[]string{"members"}, "svc1"},
		{[]string{"jobs", "enqueue", "--type", "t", "--key", "k1"}, "enqueued job"},
		{[]string{"jobs", "list"}, "pending 1"},
		{[]string{"drain", "--undo"}, "eligible"},
	} {
		out, stderr, err := runEnv(t, env, c.args...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Fatalf("%v: %v\n%s%s", c.args, err, out, stderr)
		}
	}
	// Operator placement rules through the CLI, the client, the API and
	// the node to the ledger.
	for {
		if us, err := n.UpgradeStatus(); err == nil && us.Active >= 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the cluster never ran version 3")
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pin", "2", "svc1", "--reason", "hot tenant"}, "hot tenant"},
		{[]string{"exclude", "ghost", "--reason", "retired"}, "ghost"},
		{[]string{"placement"}, "pin      2"},
		{[]string{"pin", "--undo", "2"}, "exclude"},
		{[]string{"exclude", "--undo", "ghost"}, "no pins or exclusions"},
		{[]string{"members"}, "WEIGHT"},
		// The deny-list (cluster version 5, which a new cluster runs).
		{[]string{"node", "revoke", "ghost", "--reason", "stolen"}, "stolen"},
		{[]string{"node", "revoke", "--serial", "0A:FF"}, "aff"},
		{[]string{"node", "revocations"}, "ghost"},
		{[]string{"node", "revoke", "ghost", "--undo"}, "aff"},
		{[]string{"node", "revoke", "--serial", "aff", "--undo"}, "no revocations"},
	} {
		out, stderr, err := runEnv(t, env, c.args...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Fatalf("%v: %v\n%s%s", c.args, err, out, stderr)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pin", "2"}, "want a shard id and a node id"},
		{[]string{"pin", "x", "svc1"}, "want a shard id"},
		{[]string{"pin", "9", "svc1"}, "400"},
		{[]string{"pin", "1", "nobody"}, "no such node"},
		{[]string{"exclude"}, "want one node id"},
		{[]string{"node", "revoke"}, "node: want"},
		{[]string{"node", "revoke", "a", "b"}, "node: want"},
	} {
		if _, _, err := runEnv(t, env, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
	// The last eligible node cannot hand over, and says so instead of
	// "drained" while it owns every shard.
	out, _, err := runEnv(t, env, "drain", "--wait", "200ms")
	if err == nil || !strings.Contains(err.Error(), "svc1 cannot hand over: no other node is eligible") || strings.Contains(out, "drained") {
		t.Fatalf("drain of the only node: %v %q", err, out)
	}
	if out, _, err := runEnv(t, env, "drain", "--undo"); err != nil || !strings.Contains(out, "eligible") {
		t.Fatalf("undrain: %v %q", err, out)
	}
	if _, _, err := runEnv(t, map[string]string{"TENURE_ADDR": srv.URL}, "status"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the token: %v", err)
	}
	// A server that is not tenure says so.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>hello</html>"))
	}))
	defer other.Close()
	if _, _, err := runEnv(t, nil, "status", "--addr", other.URL); err == nil || !strings.Contains(err.Error(), "not a tenure agent") {
		t.Fatalf("non-tenure server: %v", err)
	}
}
