package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/certs"
)

// The bench's certificates are node certificates a Reloader accepts, and
// -tls (the default) puts them on every agent's command line; -tls=false
// leaves the flags off.
func TestFailoverTLS(t *testing.T) {
	dir := t.TempDir()
	ids := []string{"bench-00", "bench-01", "bench-02"}
	if err := writeNodeCerts(dir, ids); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		r, err := certs.NewReloader(certs.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, id+".pem"), Key: filepath.Join(dir, id+"-key.pem")}, nil)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got := r.Identity(); got != (certs.Identity{Name: id, Role: certs.RoleNode}) {
			t.Errorf("%s: identity %+v", id, got)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "bench-00-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v", fi, err)
	}

	o, err := parseFailoverFlags(nil, &strings.Builder{})
	if err != nil || !o.tls {
		t.Fatalf("default options: tls %v, %v", o.tls, err)
	}
	c := &foCluster{opts: o, tlsDir: dir, agents: []*foAgent{{id: "bench-00"}, {id: "bench-01"}, {id: "bench-02"}}}
	args := c.agentArgs(c.agents[1])
	i := slices.Index(args, "--tls-cert")
	if i < 0 || args[i+1] != filepath.Join(dir, "bench-01.pem") || !slices.Contains(args, "--tls-ca") || !slices.Contains(args, "--tls-key") {
		t.Errorf("agent args %q lack bench-01's certificate flags", args)
	}
	if o, err = parseFailoverFlags([]string{"-tls=false"}, &strings.Builder{}); err != nil || o.tls {
		t.Fatalf("-tls=false: tls %v, %v", o.tls, err)
	}
	c = &foCluster{opts: o, agents: c.agents}
	if args := c.agentArgs(c.agents[0]); slices.Contains(args, "--tls-ca") {
		t.Errorf("-tls=false: agent args %q carry --tls-ca", args)
	}
}

func TestStartsBetween(t *testing.T) {
	m, err := ParseLabeledCounter(strings.NewReader(
		"# HELP tenure_shard_starts_total x\n"+
			`tenure_shard_starts_total{on="commit"} 12`+"\n"+
			`tenure_shard_starts_total{on="word"} 7`+"\n"+
			`tenure_shard_starts_totalx{on="word"} 99`+"\n"), startsSeries, "on")
	if err != nil || m["commit"] != 12 || m["word"] != 7 || len(m) != 2 {
		t.Fatalf("parse = %v, %v", m, err)
	}
	before := map[string]map[string]int{"a": {"commit": 10, "word": 2}, "b": {"commit": 5, "word": 5}}
	after := map[string]map[string]int{"a": m, "b": {"commit": 1, "word": 0}, "c": {"word": 3}}
	// a: +2 commit, +5 word; b restarted: 1 commit; c new: 3 words.
	if got := startsBetween(before, after); got["commit"] != 3 || got["word"] != 8 {
		t.Errorf("startsBetween = %v, want commit 3, word 8", got)
	}
}
