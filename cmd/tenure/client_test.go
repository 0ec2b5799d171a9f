package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// runEnv runs the CLI with a fixed environment.
func runEnv(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	err := m.Run(context.Background(), args)
	return out.String(), errb.String(), err
}

func TestCLIReadCommands(t *testing.T) {
	_, srv := serveFake(t, "")
	addr := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"status"}, []string{"n1 (group default", "control leader  n2", "n1, n2, n3", "healthy", "acting on", "3 of 8 shards", "ID", "LEADER"}},
		{[]string{"shards"}, []string{"SHARD", "OWNER", "EPOCH", "unowned", "join n3", "900ms", "owned (fenced)"}},
		{[]string{"shards", "--owner", "n3"}, []string{"join n3"}},
		{[]string{"members"}, []string{"n1", "n2", "n3", "127.0.0.1:9946"}},
		{[]string{"elections"}, []string{"cron", "NAME"}},
		{[]string{"moves"}, []string{"REASON", "CAUSE"}},
		{[]string{"jobs", "list"}, []string{"pending 0", "dead 0", "ID"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, stderr, err := runEnv(t, map[string]string{"TENURE_ADDR": addr}, c.args...)
			if err != nil {
				t.Fatalf("err %v, stderr %s", err, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
			// --json prints something that parses.
			out, _, err = runEnv(t, nil, append(c.args, "--addr", srv.URL, "--json")...)
			if err != nil || !json.Valid([]byte(out)) {
				t.Fatalf("--json: err %v, out %q", err, out)
			}
		})
	}
	out, _, _ := runEnv(t, nil, "shards", "--addr", addr, "--owner", "n3")
	if strings.Contains(out, "join n2") {
		t.Fatalf("--owner n3 shows n2's shards:\n%s", out)
	}
}

func TestCLIJobsAndDrain(t *testing.T) {
	_, srv := serveFake(t, "tok")
	env := map[string]string{"TENURE_ADDR": srv.URL, "TENURE_TOKEN": "tok"}
	out, _, err := runEnv(t, env, "jobs", "enqueue", "--type", "email", "--key", "k1", "--payload", `{"a":1}`)
	if err != nil || !strings.Contains(out, "enqueued job 1") {
		t.Fatalf("enqueue: %v %q", err, out)
	}
	out, _, err = runEnv(t, env, "jobs", "enqueue", "--type", "email", "--key", "k1", "--request-id", "order-1")
	if err != nil || !strings.Contains(out, "already enqueued job 1") || !strings.Contains(out, "request id order-1") {
		t.Fatalf("enqueue twice: %v %q", err, out)
	}
	out, _, err = runEnv(t, env, "jobs", "get", "1")
	if err != nil || !strings.Contains(out, "email") || !strings.Contains(out, "pending") {
		t.Fatalf("get: %v %q", err, out)
	}
	// The fake offers no read barriers: 501.
	if _, _, err := runEnv(t, env, "jobs", "get", "1", "--consistent"); err == nil || !strings.Contains(err.Error(), "501") {
		t.Fatalf("get --consistent from a backend without barriers: %v", err)
	}
	out, _, err = runEnv(t, env, "jobs", "get", "1")
	if err != nil {
		t.Fatalf("get: %v %q", err, out)
	}
	if _, _, err := runEnv(t, env, "jobs", "get", "42"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("get missing: %v", err)
	}
	out, _, err = runEnv(t, env, "jobs", "list", "--state", "pending")
	if err != nil || !strings.Contains(out, "pending 1") || !strings.Contains(out, "k1") {
		t.Fatalf("list: %v %q", err, out)
	}
	// Without the token the agent refuses.
	_, _, err = runEnv(t, map[string]string{"TENURE_ADDR": srv.URL}, "drain")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("drain without token: %v", err)
	}
	out, _, err = runEnv(t, env, "drain")
	if err != nil || !strings.Contains(out, "n1 drained") {
		t.Fatalf("drain: %v %q", err, out)
	}
	out, _, err = runEnv(t, env, "drain", "--undo")
	if err != nil || !strings.Contains(out, "eligible") {
		t.Fatalf("undrain: %v %q", err, out)
	}
}

func TestCLIBadUsage(t *testing.T) {
	_, srv := serveFake(t, "")
	env := map[string]string{"TENURE_ADDR": srv.URL}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"status", "extra"}, "unexpected arguments"},
		{[]string{"shards", "--state", "bogus"}, `"bogus"`},
		{[]string{"jobs"}, "no subcommand"},
		{[]string{"jobs", "frob"}, `"frob"`},
		{[]string{"jobs", "get"}, "exactly one"},
		{[]string{"jobs", "enqueue", "--key", "k"}, "--type"},
		{[]string{"jobs", "enqueue", "--type", "t"}, "--key or --shard-key"},
		{[]string{"jobs", "enqueue", "--type", "t", "--key", "k", "--payload", "{"}, "not valid JSON"},
		{[]string{"jobs", "enqueue", "--type", "t", "--key", "k", "--request-id", `a"b`}, "--request-id"},
		{[]string{"jobs", "enqueue", "--type", "t", "--key", "k", "--request-id", strings.Repeat("r", 256)}, "--request-id"},
		{[]string{"jobs", "list", "--state", "running"}, `"running"`},
		{[]string{"status", "--addr", "http://"}, "--addr"},
		{[]string{"status", "--nope"}, "nope"},
	}
	for _, c := range cases {
		_, _, err := runEnv(t, env, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want error containing %q", c.args, err, c.want)
		}
	}
}

func TestCLINoAgent(t *testing.T) {
	// A port nobody listens on: bind one, then close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, cmd := range []string{"status", "shards", "members", "elections", "drain"} {
		_, _, err := runEnv(t, nil, cmd, "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), "no agent answers at http://"+addr) || !strings.Contains(err.Error(), "TENURE_ADDR") {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
}

func TestCLIFlagsAfterArguments(t *testing.T) {
	_, srv := serveFake(t, "tok")
	env := map[string]string{"TENURE_TOKEN": "tok"}
	if _, _, err := runEnv(t, env, "jobs", "enqueue", "--type", "email", "--key", "k1", "--addr", srv.URL); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runEnv(t, env, "jobs", "get", "1", "--addr", srv.URL, "--json")
	if err != nil || !json.Valid([]byte(out)) || !strings.Contains(out, `"email"`) {
		t.Fatalf("jobs get 1 --addr X --json: %v %q %s", err, out, stderr)
	}
}

func TestCLINotTenure(t *testing.T) {
	for _, code := range []int{200, 404} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(code)
			_, _ = w.Write([]byte("<html><body>welcome to nginx</body></html>"))
		}))
		for _, cmd := range [][]string{{"status"}, {"members"}, {"jobs", "get", "1"}, {"drain", "--node", "n2"}} {
			_, _, err := runEnv(t, nil, append(cmd, "--addr", srv.URL)...)
			if err == nil || !strings.Contains(err.Error(), "not a tenure agent") {
				t.Errorf("%d %v: %v", code, cmd, err)
			}
		}
		srv.Close()
	}
}

func TestCLIDrainByNode(t *testing.T) {
	fa, a := serveFake(t, "tok")
	fb, b := serveFake(t, "tok")
	fb.Self = "n2"
	fa.SetMember(apitypes.Member{ID: "n2", State: "alive", Live: true, Health: 1, HTTPAddr: strings.TrimPrefix(b.URL, "http://")})
	env := map[string]string{"TENURE_TOKEN": "tok"}
	out, _, err := runEnv(t, env, "drain", "--node", "n2", "--addr", a.URL)
	if err != nil || !strings.Contains(out, "n2 drained") {
		t.Fatalf("drain --node n2: %v %q", err, out)
	}
	if got := fb.Members()[0]; !got.Draining {
		t.Fatal("n2's agent was not asked to drain")
	}
	if _, _, err := runEnv(t, env, "drain", "--node", "n9", "--addr", a.URL); err == nil || !strings.Contains(err.Error(), "n9 is not a member") {
		t.Fatalf("drain --node n9: %v", err)
	}
	fa.SetMember(apitypes.Member{ID: "n3", State: "alive"})
	if _, _, err := runEnv(t, env, "drain", "--node", "n3", "--addr", a.URL); err == nil || !strings.Contains(err.Error(), "no HTTP address") {
		t.Fatalf("drain --node n3: %v", err)
	}
	// The address n2 gossips answers as another node.
	fb.Self = "n7"
	if _, _, err := runEnv(t, env, "drain", "--node", "n2", "--addr", a.URL); err == nil || !strings.Contains(err.Error(), "is n7, not n2") {
		t.Fatalf("drain --node n2 reaching n7: %v", err)
	}
}

// Draining the last eligible node says it cannot hand over, rather than
// "drained" while it still owns its shards.
func TestCLIDrainLastEligible(t *testing.T) {
	f, srv := serveFake(t, "tok")
	f.DrainNowhere = true
	env := map[string]string{"TENURE_ADDR": srv.URL, "TENURE_TOKEN": "tok"}
	out, _, err := runEnv(t, env, "drain")
	if err == nil || !strings.Contains(err.Error(), "n1 cannot hand over") || strings.Contains(out, "drained") {
		t.Fatalf("drain of the last eligible node: %v %q", err, out)
	}
	out, _, err = runEnv(t, env, "drain", "--json")
	var d apitypes.Drain
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d.Done || d.OthersEligible || d.Owned == 0 || d.Reason == "" {
		t.Fatalf("--json: %v %q", err, out)
	}
}
