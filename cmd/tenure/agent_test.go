package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/node"
)

// loadCfg loads the agent's config with exactly env as the environment:
// ff reads TENURE_* from the process environment, so every TENURE_*
// variable of the test process is cleared (t.Setenv restores it) and env's
// are set; HOSTNAME and CLUSTER_NAME come through getenv.
func loadCfg(t *testing.T, env map[string]string, args ...string) (agentConfig, error) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "")
		}
	}
	for k, v := range env {
		if strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, v)
		}
	}
	var stderr bytes.Buffer
	return loadAgentConfig(args, func(k string) string { return env[k] }, &stderr)
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAgentConfigPrecedence(t *testing.T) {
	file := writeFile(t, "agent.conf", `
# comment
data-dir = /from/file
profile = "safe"
partitions = 64
seeds = a:1, b:2
tags = zone=a,rack=r1
`)
	env := map[string]string{
		"HOSTNAME": "pod-0", "CLUSTER_NAME": "blue",
		"TENURE_CONFIG": file, "TENURE_PROFILE": "fast", "TENURE_HTTP_ADDR": "127.0.0.1:9000",
	}
	c, err := loadCfg(t, env, "--http-addr", "127.0.0.1:9001")
	if err != nil {
		t.Fatal(err)
	}
	want := defaultAgentConfig(func(string) string { return "" })
	want.NodeID, want.Group = "pod-0", "blue"
	want.DataDir, want.Profile, want.Partitions = "/from/file", "fast", 64
	want.Seeds = []string{"a:1", "b:2"}
	want.Tags = map[string]string{"zone": "a", "rack": "r1"}
	want.HTTPAddr = "127.0.0.1:9001"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	// TENURE_NODE_ID wins over HOSTNAME, the flag over both.
	c, err = loadCfg(t, map[string]string{"HOSTNAME": "h", "TENURE_NODE_ID": "e", "TENURE_BOOTSTRAP_EXPECT": "1"})
	if err != nil || c.NodeID != "e" {
		t.Fatalf("env node id: %q %v", c.NodeID, err)
	}
	c, err = loadCfg(t, map[string]string{"HOSTNAME": "h"}, "--node-id", "f", "--bootstrap-expect=1")
	if err != nil || c.NodeID != "f" {
		t.Fatalf("flag node id: %q %v", c.NodeID, err)
	}
}

// --voter and --voters-own-shards reach node.Config (env names as the
// Kubernetes manifests use them).
func TestAgentVoterFlags(t *testing.T) {
	c, err := loadCfg(t, map[string]string{"HOSTNAME": "m-0", "TENURE_VOTER": "never", "TENURE_VOTERS_OWN_SHARDS": "false"}, "--bootstrap-expect=1", "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	c.DataDir = t.TempDir()
	nc, err := nodeConfig(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nc.Voter != node.VoterNever || !nc.VoterOwnsNoShards {
		t.Fatalf("node config Voter %q VoterOwnsNoShards %v, want never, true", nc.Voter, nc.VoterOwnsNoShards)
	}
	c, err = loadCfg(t, map[string]string{"HOSTNAME": "v-0"}, "--bootstrap-expect=1", "--voter=always", "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	c.DataDir = t.TempDir()
	if nc, err = nodeConfig(c, nil); err != nil || nc.Voter != node.VoterAlways || nc.VoterOwnsNoShards {
		t.Fatalf("node config Voter %q VoterOwnsNoShards %v (%v), want always, false", nc.Voter, nc.VoterOwnsNoShards, err)
	}
}

func TestAgentConfigJSONFile(t *testing.T) {
	file := writeFile(t, "agent.json", `{"node-id": "j1", "bootstrap-expect": 3, "seeds": ["x:1","y:2"], "workload": false,
		"tags": {"zone": "b"}, "encrypt": "MDEyMzQ1Njc4OWFiY2RlZg==", "tick": "250ms"}`)
	c, err := loadCfg(t, nil, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "j1" || len(c.Seeds) != 2 || c.Workload || c.Tags["zone"] != "b" || string(c.EncryptionKey) != "0123456789abcdef" || c.TickEvery != 250*time.Millisecond {
		t.Fatalf("%+v", c)
	}
}

// TestAgentDiskless: --diskless --voter=never is a disk-less member with no
// data dir, even though --data-dir has a default.
func TestAgentDiskless(t *testing.T) {
	c, err := loadCfg(t, map[string]string{"HOSTNAME": "m1"}, "--seeds", "127.0.0.1:7946", "--diskless", "--voter=never",
		"--gossip-addr", "127.0.0.1:17946", "--raft-addr", "127.0.0.1:17947")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nodeConfig(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !nc.Diskless || nc.DataDir != "" || nc.NodeID != "m1" || nc.Voter != node.VoterNever {
		t.Fatalf("node config %+v", nc)
	}
	if err := nc.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAgentConfigErrorsNameTheKey(t *testing.T) {
	base := map[string]string{"HOSTNAME": "n1"}
	cases := []struct {
		name string
		env  map[string]string
		file string
		args []string
		want []string
	}{
		{"unknown file key", nil, "data-dir = x\nbogus-key = 1\n", nil, []string{`unknown key "bogus-key"`, "line 2"}},
		{"bad file value", nil, "partitions = lots\n", nil, []string{`key "partitions"`, `"lots"`}},
		{"bad file line", nil, "just words\n", nil, []string{"line 1", "key = value"}},
		{"bad json", nil, `{"node-id": }`, nil, []string{"not valid JSON"}},
		{"unknown json key", nil, `{"nodeid": "x"}`, nil, []string{`unknown key "nodeid"`}},
		{"json array of numbers", nil, `{"seeds": [1]}`, nil, []string{`key "seeds"`, "not a string"}},
		{"bad env", map[string]string{"TENURE_PARTITIONS": "x"}, "", nil, []string{"TENURE_PARTITIONS"}},
		{"bad key base64", map[string]string{"TENURE_ENCRYPT": "!!!"}, "", nil, []string{"TENURE_ENCRYPT", "base64"}},
		{"bad key in file", nil, "encrypt = YWJj\n", nil, []string{`key "encrypt"`, "<redacted>", "3 bytes"}},
		{"bad key size", nil, "", []string{"--encrypt", "YWJj"}, []string{"3 bytes"}},
		{"profile", nil, "", []string{"--profile", "turbo"}, []string{`profile "turbo"`}},
		{"no seeds", nil, "", []string{"--bootstrap-expect", "3"}, []string{"seeds empty"}},
		{"addr", nil, "", []string{"--bootstrap-expect", "1", "--gossip-addr", "nope"}, []string{`gossip-addr "nope"`}},
		{"seed addr", nil, "", []string{"--seeds", "a:1,bad"}, []string{`seeds[1] "bad"`}},
		{"witness", nil, "", []string{"--bootstrap-expect", "1", "--witness", "ftp://x"}, []string{`witness "ftp://x"`}},
		{"tags", nil, "", []string{"--tags", "novalue"}, []string{`tag "novalue"`}},
		{"log level", nil, "", []string{"--bootstrap-expect", "1", "--log-level", "loud"}, []string{`log-level "loud"`}},
		{"args", nil, "", []string{"--bootstrap-expect", "1", "extra"}, []string{`"extra"`}},
		{"no node id", map[string]string{"HOSTNAME": ""}, "", []string{"--bootstrap-expect", "1"}, []string{"node-id is empty"}},
		{"voter", map[string]string{"TENURE_VOTER": "sometimes"}, "", []string{"--bootstrap-expect", "1"}, []string{`voter "sometimes"`}},
		{"diskless voter", nil, "", []string{"--seeds", "a:1", "--diskless"}, []string{`diskless with voter "auto"`, "--voter=never"}},
		{"fenced range", nil, "", []string{"--bootstrap-expect", "1", "--fenced-shards", "0-7,9-3"}, []string{`"9-3"`, "first after last"}},
		{"fenced not a shard", nil, "fenced-shards = 0-7,x\n", nil, []string{`key "fenced-shards"`, `"x"`, "want F or F-L"}},
		{"fenced past the last shard", nil, "", []string{"--bootstrap-expect", "1", "--partitions", "64", "--fenced-shards", "0-3,60-64"},
			[]string{"fenced-shards 60-64", "shard 64 does not exist", "partitions 64"}},
		{"fenced json", nil, `{"fenced-shards": [0, 1]}`, nil, []string{`key "fenced-shards"`, "not a string"}},
		{"voter without data dir", nil, "", []string{"--bootstrap-expect", "1", "--data-dir", ""}, []string{"data-dir is empty", `voter "auto"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range c.env {
				env[k] = v
			}
			args := c.args
			if c.file != "" {
				args = append([]string{"--config", writeFile(t, "cfg", c.file)}, args...)
			}
			_, err := loadCfg(t, env, args...)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not contain %q", err, w)
				}
			}
			// A secret is never repeated in an error.
			for _, secret := range []string{"!!!", "YWJj"} {
				if strings.Contains(err.Error(), secret) && c.name != "bad key size" {
					t.Fatalf("error %q repeats the secret %q", err, secret)
				}
			}
		})
	}
}

func TestAgentHelp(t *testing.T) {
	_, stderr, err := run(t, "agent", "-h")
	if err != nil || !strings.Contains(stderr, "TENURE_DATA_DIR") || !strings.Contains(stderr, "--bootstrap-expect") && !strings.Contains(stderr, "-bootstrap-expect") {
		t.Fatalf("err %v stderr %s", err, stderr)
	}
}

func TestAdvertiseAddr(t *testing.T) {
	if a, err := advertiseAddr("127.0.0.1:5", ""); err != nil || a != "127.0.0.1:5" {
		t.Fatalf("%q %v", a, err)
	}
	if a, err := advertiseAddr("0.0.0.0:5", "10.0.0.1:6"); err != nil || a != "10.0.0.1:6" {
		t.Fatalf("%q %v", a, err)
	}
	// A wildcard bind advertises a real interface address, or explains.
	a, err := advertiseAddr("0.0.0.0:5", "")
	if err == nil && (strings.HasPrefix(a, "0.0.0.0") || !strings.HasSuffix(a, ":5")) {
		t.Fatalf("advertised %q", a)
	}
}

func TestDashboardURL(t *testing.T) {
	for in, want := range map[string]string{"0.0.0.0:80": "http://127.0.0.1:80/", "[::]:8": "http://127.0.0.1:8/", "10.1.2.3:9": "http://10.1.2.3:9/", "": ""} {
		if got := dashboardURL(in, false); got != want {
			t.Errorf("dashboardURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := dashboardURL("127.0.0.1:7948", true); got != "https://127.0.0.1:7948/" {
		t.Errorf("dashboardURL over TLS = %q", got)
	}
}

// TestAgentFencedShards: --fenced-shards, TENURE_FENCED_SHARDS and the
// config key (a string or an array of strings) all give the ranges.
func TestAgentFencedShards(t *testing.T) {
	want := []node.ShardRange{{First: 0, Last: 63}, {First: 128, Last: 128}}
	for name, load := range map[string]func() (agentConfig, error){
		"flag": func() (agentConfig, error) {
			return loadCfg(t, map[string]string{"HOSTNAME": "n1"}, "--bootstrap-expect", "1", "--fenced-shards", "0-63, 128")
		},
		"env": func() (agentConfig, error) {
			return loadCfg(t, map[string]string{"HOSTNAME": "n1", "TENURE_FENCED_SHARDS": "0-63,128"}, "--bootstrap-expect", "1")
		},
		"file": func() (agentConfig, error) {
			return loadCfg(t, map[string]string{"HOSTNAME": "n1"}, "--config", writeFile(t, "a.conf", "bootstrap-expect = 1\nfenced-shards = 0-63,128\n"))
		},
		"json": func() (agentConfig, error) {
			return loadCfg(t, map[string]string{"HOSTNAME": "n1"}, "--config", writeFile(t, "a.json", `{"bootstrap-expect": 1, "fenced-shards": ["0-63", "128"]}`))
		},
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(c.FencedShards, want) {
			t.Fatalf("%s: fenced shards %v, want %v", name, c.FencedShards, want)
		}
		if s := c.FencedShards.String(); s != "0-63,128" {
			t.Fatalf("%s: String() = %q", name, s)
		}
	}
	var many []string
	for i := range maxFencedRanges + 1 {
		many = append(many, fmt.Sprint(i))
	}
	if _, err := loadCfg(t, map[string]string{"HOSTNAME": "n1"}, "--fenced-shards", strings.Join(many, ",")); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("%d ranges: %v", len(many), err)
	}
}
