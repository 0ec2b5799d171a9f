package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
	"github.com/tenurehq/tenure/node"
)

func TestAgentConfigTokens(t *testing.T) {
	base := map[string]string{"HOSTNAME": "n1", "TENURE_BOOTSTRAP_EXPECT": "1"}
	wf := writeFile(t, "write.token", "  w-secret\n")
	rf := writeFile(t, "read.token", "r-secret\n")
	c, err := loadCfg(t, base, "--token-file", wf, "--read-token-file", rf)
	if err != nil || c.Token != "w-secret" || c.ReadToken != "r-secret" {
		t.Fatalf("token files: %q %q %v", c.Token, c.ReadToken, err)
	}
	env := map[string]string{"HOSTNAME": "n1", "TENURE_BOOTSTRAP_EXPECT": "1", "TENURE_TOKEN": "w1", "TENURE_READ_TOKEN": "r1",
		"TENURE_HTTP_TLS_CERT": "c.pem", "TENURE_HTTP_TLS_KEY": "k.pem", "TENURE_METRICS_AUTH": "true", "TENURE_HTTP_INSECURE": "1"}
	c, err = loadCfg(t, env)
	if err != nil || c.Token != "w1" || c.ReadToken != "r1" || c.HTTPTLSCert != "c.pem" || c.HTTPTLSKey != "k.pem" || !c.MetricsAuth || !c.HTTPInsecure {
		t.Fatalf("env: %+v %v", c, err)
	}
	if c.HTTPMaxConnsPerClient != defaultMaxConnsPerClient || c.MaxPendingJobs != defaultMaxPendingJobs {
		t.Fatalf("defaults: %d %d", c.HTTPMaxConnsPerClient, c.MaxPendingJobs)
	}
	empty := writeFile(t, "empty.token", "\n\n")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "a", "--token-file", wf}, "give one"},
		{[]string{"--token-file", empty}, "empty"},
		{[]string{"--token-file", filepath.Join(t.TempDir(), "missing")}, "token-file"},
		{[]string{"--read-token", "r"}, "without token"},
		{[]string{"--token", "same", "--read-token", "same"}, "read-token equals token"},
		{[]string{"--token", "has space"}, "token: contains white space"},
		{[]string{"--http-tls-cert", "c.pem"}, "give both or neither"},
		{[]string{"--http-max-conns-per-client", "-1"}, "http-max-conns-per-client"},
		{[]string{"--max-pending-jobs", "-1"}, "max-pending-jobs"},
	} {
		_, err := loadCfg(t, base, bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error with %q", bad.args, err, bad.want)
		}
		if err != nil && (strings.Contains(err.Error(), "w-secret") || strings.Contains(err.Error(), "has space")) {
			t.Errorf("%v: error shows the token: %v", bad.args, err)
		}
	}
}

func TestHTTPExposure(t *testing.T) {
	for addr, loop := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "127.1.2.3:1": true,
		"0.0.0.0:1": false, ":1": false, "[::]:1": false, "10.0.0.1:1": false, "example.com:1": false} {
		if got := isLoopbackAddr(addr); got != loop {
			t.Errorf("isLoopbackAddr(%q) = %v", addr, got)
		}
		c := agentConfig{Config: node.Config{HTTPAddr: addr}}
		_, err := c.checkHTTPExposure()
		if (err == nil) != loop {
			t.Errorf("%s without token: %v", addr, err)
		}
		c.Token = "t"
		if warn, err := c.checkHTTPExposure(); err != nil || warn != "" {
			t.Errorf("%s with token: %q %v", addr, warn, err)
		}
		c.Token, c.HTTPInsecure = "", true
		if warn, err := c.checkHTTPExposure(); err != nil || (warn == "") == !loop {
			t.Errorf("%s with --http-insecure: %q %v", addr, warn, err)
		}
	}
}

// The agent refuses a non-loopback HTTP address without a token before it
// starts anything, and runs open with --http-insecure, saying so.
func TestAgentRefusesOpenHTTP(t *testing.T) {
	var started atomic.Bool
	fr := &fakeRunning{Node: httpapitest.NewNode()}
	old := startNode
	startNode = func(ctx context.Context, c agentConfig, log *slog.Logger) (runningNode, error) {
		started.Store(true)
		return fr, nil
	}
	t.Cleanup(func() { startNode = old })
	args := []string{"agent", "--node-id", "n1", "--bootstrap-expect", "1", "--http-addr", "0.0.0.0:0",
		"--gossip-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--workload=false", "--log-format", "json"}
	var logs syncBuffer
	m := &Main{Stdout: &logs, Stderr: &logs, Getenv: func(string) string { return "" }}
	err := m.Run(context.Background(), args)
	if err == nil || !strings.Contains(err.Error(), "not loopback") || started.Load() {
		t.Fatalf("open non-loopback HTTP: err %v, node started %v", err, started.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, append(args, "--http-insecure")) }()
	waitFor(t, 20*time.Second, "the agent to run", func() bool { return strings.Contains(logs.String(), "agent running") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent: %v", err)
	}
	if !strings.Contains(logs.String(), "INSECURE: the HTTP API") {
		t.Fatalf("no loud warning:\n%s", logs.String())
	}
}

// writeKeyPair issues a server certificate for 127.0.0.1 from a fresh CA
// into dir and returns the CA file.
func writeKeyPair(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caPEM, caKey, err := certs.NewCA("http-test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := certs.Issue(caPEM, caKey, certs.Identity{Name: "api", Role: certs.RoleNode}, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "api.pem"), filepath.Join(dir, "api-key.pem")
	for p, b := range map[string][]byte{caFile: caPEM, certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// serveReal serves h with the agent's server code on 127.0.0.1.
func serveReal(t *testing.T, h http.Handler, lim httpLimits, tlsCfg *tls.Config, maxPerClient int) (string, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lln := limitPerClient(ln, maxPerClient, slog.New(slog.DiscardHandler))
	srv := newHTTPServer(h, lim, tlsCfg, slog.New(slog.DiscardHandler))
	go func() { _ = serveHTTP(srv, lln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), lln
}

func TestHTTPSAndCertReload(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeKeyPair(t, dir)
	tlsCfg, err := httpTLSConfig(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f := httpapitest.NewNode()
	a := newFakeAPI(t, f, httpapi.Options{Token: "w-token"})
	addr, _ := serveReal(t, a, defaultHTTPLimits, tlsCfg, 0)

	// The CLI: a bare host:port with --ca speaks https and verifies.
	env := map[string]string{"TENURE_ADDR": addr, "TENURE_TOKEN": "w-token"}
	if out, stderr, err := runEnv(t, env, "status", "--ca", caFile); err != nil || !strings.Contains(out, "n1") {
		t.Fatalf("status over https: %v %s %s", err, out, stderr)
	}
	if _, _, err := runEnv(t, map[string]string{"TENURE_ADDR": "https://" + addr, "TENURE_TOKEN": "w-token", "TENURE_HTTP_CA": caFile}, "members"); err != nil {
		t.Fatalf("members over https with TENURE_HTTP_CA: %v", err)
	}
	tf := writeFile(t, "tok", "w-token\n")
	if _, _, err := runEnv(t, map[string]string{"TENURE_ADDR": "https://" + addr}, "drain", "--undo", "--tls-ca", caFile, "--token-file", tf); err != nil {
		t.Fatalf("drain --undo with --tls-ca and --token-file: %v", err)
	}
	if _, _, err := runEnv(t, map[string]string{"TENURE_ADDR": "https://" + addr, "TENURE_TOKEN": "w-token"}, "status"); err == nil {
		t.Fatal("https without --ca trusted an unknown CA")
	}
	if _, _, err := runEnv(t, env, "status"); err == nil {
		t.Fatal("plain http to an https port succeeded")
	}
	// TLS 1.1 is refused.
	if c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil {
		c.Close()
		t.Fatal("TLS 1.1 handshake succeeded")
	}

	// Rotate: a certificate from another CA replaces the files; the server
	// serves it once it notices (checked at most once a second).
	leaf := func() []byte {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	first := leaf()
	caFile2, _, _ := writeKeyPair(t, dir)
	waitFor(t, 10*time.Second, "the rotated certificate to be served", func() bool { return !bytes.Equal(leaf(), first) })
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(caFile2)
	pool.AppendCertsFromPEM(b)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("new CA does not verify the rotated certificate: %v", err)
	}
	c.Close()
}

// A drain waits longer than the server's read and write timeouts: the
// handler moves its own deadlines, so the answer still arrives.
func TestDrainOutlivesServerTimeouts(t *testing.T) {
	f := httpapitest.NewNode()
	f.DrainBlocks = true
	a := newFakeAPI(t, f, httpapi.Options{})
	lim := httpLimits{ReadHeaderTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, IdleTimeout: time.Second, MaxHeaderBytes: 4 << 10}
	addr, _ := serveReal(t, a, lim, nil, 0)
	start := time.Now()
	resp, err := http.Post("http://"+addr+"/v1/drain?wait=600ms", "application/json", nil)
	if err != nil {
		t.Fatalf("drain past the server's timeouts: %v", err)
	}
	defer resp.Body.Close()
	var d apitypes.Drain
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drain: %d %v", resp.StatusCode, err)
	}
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("drain answered after %v, before its wait", el)
	}
	// Other requests still obey the limits: an oversized header is refused.
	req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("oversized header: %d", resp.StatusCode)
		}
	}
}

func TestPerClientConnectionCap(t *testing.T) {
	a := newFakeAPI(t, httpapitest.NewNode(), httpapi.Options{})
	addr, ln := serveReal(t, a, defaultHTTPLimits, nil, 2)
	pl := ln.(*perClientListener)
	get := func(c net.Conn) (int, error) {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			return 0, err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code, err := get(c); err != nil || code != 200 {
			t.Fatalf("connection under the cap: %d %v", code, err)
		}
		conns = append(conns, c)
	}
	if n := pl.openConns("127.0.0.1"); n != 2 {
		t.Fatalf("open connections %d, want 2", n)
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if code, err := get(third); err == nil {
		t.Fatalf("third connection served (%d) over a cap of 2", code)
	}
	conns[0].Close()
	waitFor(t, 10*time.Second, "the closed connection's slot to free", func() bool { return pl.openConns("127.0.0.1") == 1 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, err := get(c); err != nil || code != 200 {
		t.Fatalf("connection after a slot freed: %d %v", code, err)
	}
}

func TestCLIJobsListPages(t *testing.T) {
	_, srv := serveFake(t, "")
	env := map[string]string{"TENURE_ADDR": srv.URL}
	for i := range 3 {
		if _, _, err := runEnv(t, env, "jobs", "enqueue", "--type", "t", "--key", fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := runEnv(t, env, "jobs", "list", "--limit", "2")
	if err != nil || !strings.Contains(out, "more: tenure jobs list --after 2") {
		t.Fatalf("first page: %v %q", err, out)
	}
	out, _, err = runEnv(t, env, "jobs", "list", "--limit", "2", "--after", "2")
	if err != nil || strings.Contains(out, "more:") || !strings.Contains(out, "k2") || strings.Contains(out, "k0") {
		t.Fatalf("second page: %v %q", err, out)
	}
}
