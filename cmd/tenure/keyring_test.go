package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/node"
)

// The keyring over HTTP and the CLI, on a real single node with gossip
// encryption: list shows fingerprints (never keys), a full rotation works,
// bad input answers 400, and the CLI drives it. Without a key the API
// answers 501.
func TestKeyringAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	c := defaultAgentConfig(func(string) string { return "" })
	c.NodeID, c.BootstrapExpect, c.DataDir, c.Profile, c.Partitions = "n1", 1, t.TempDir(), "fast", 4
	c.GossipAddr, c.RaftAddr, c.HTTPAddr = freePort(t), freePort(t), ""
	c.EncryptionKey = oldKey
	n, err := startRealNode(ctx, c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	srv := httptest.NewServer(nodeAPI(t, n))
	defer srv.Close()

	b64 := base64.StdEncoding.EncodeToString
	r := do(t, srv, "GET", "/v1/keyring", "")
	if r.code != 200 || !strings.Contains(r.body, node.KeyFingerprint(oldKey)) || strings.Contains(r.body, b64(oldKey)) {
		t.Fatalf("GET /v1/keyring: %d %s", r.code, r.body)
	}
	for _, bad := range []struct{ path, body string }{
		{"/v1/keyring/install", `{"key":"AQID"}`},
		{"/v1/keyring/install", `{"key":"!!"}`},
		{"/v1/keyring/install", `{}`},
		{"/v1/keyring/remove", fmt.Sprintf(`{"key":%q}`, b64(oldKey))}, // the primary
	} {
		if r := do(t, srv, "POST", bad.path, bad.body); r.code != 400 {
			t.Errorf("POST %s %s: %d %s, want 400", bad.path, bad.body, r.code, r.body)
		}
	}
	if r := do(t, srv, "POST", "/v1/keyring/rotate", fmt.Sprintf(`{"key":%q}`, b64(newKey))); r.code != 404 {
		t.Errorf("unknown op: %d %s", r.code, r.body)
	}

	var out bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
	for _, op := range []string{"install", "use"} {
		if err := m.Run(ctx, []string{"keyring", op, "--key", b64(newKey), "--addr", srv.URL, "--one"}); err != nil {
			t.Fatalf("keyring %s: %v\n%s", op, err, out.String())
		}
	}
	if err := m.Run(ctx, []string{"keyring", "remove", "--key", b64(oldKey), "--addr", srv.URL, "--one"}); err != nil {
		t.Fatalf("keyring remove: %v\n%s", err, out.String())
	}
	keys, err := n.(*realNode).n.GossipKeys()
	if err != nil || len(keys) != 1 || keys[0].Fingerprint != node.KeyFingerprint(newKey) || !keys[0].Primary {
		t.Fatalf("after rotation: %+v, %v", keys, err)
	}
	for _, bad := range [][]string{{"keyring"}, {"keyring", "rotate"}, {"keyring", "install", "--addr", srv.URL}, {"keyring", "list", "--key", b64(newKey)}} {
		if err := m.Run(ctx, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}

	// A node without gossip encryption has no keyring: 501.
	c2 := c
	c2.NodeID, c2.DataDir, c2.EncryptionKey = "n2", t.TempDir(), nil
	c2.GossipAddr, c2.RaftAddr = freePort(t), freePort(t)
	n2, err := startRealNode(ctx, c2, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close(context.Background())
	srv2 := httptest.NewServer(nodeAPI(t, n2))
	defer srv2.Close()
	if r := do(t, srv2, "GET", "/v1/keyring", ""); r.code != 501 {
		t.Errorf("GET /v1/keyring without encryption: %d %s, want 501", r.code, r.body)
	}
}
