package bench

// Certificates for the benchmark's agents: a cluster CA and one node
// certificate per agent, as `tenure tls init` makes them, so the agents
// run mutual TLS on the Raft/RPC port as a deployment does. The HTTP API
// stays plain HTTP (no --http-tls-*): the benchmark's own client is
// unchanged. Cluster version 6 relays the old owner's word only over an
// authenticated connection, so without certificates a drain measures the
// commit path alone.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/certs"
)

// benchCertValidity is how long the benchmark's certificates live.
const benchCertValidity = 7 * 24 * time.Hour

// writeNodeCerts writes ca.pem and, for each id, <id>.pem and <id>-key.pem
// (role node, SANs localhost and loopback) into dir.
func writeNodeCerts(dir string, ids []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caPEM, caKey, err := certs.NewCA("bench", benchCertValidity)
	if err != nil {
		return fmt.Errorf("bench certificates: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644); err != nil {
		return err
	}
	for _, id := range ids {
		c, k, err := certs.Issue(caPEM, caKey, certs.Identity{Name: id, Role: certs.RoleNode},
			[]string{"localhost", "127.0.0.1", "::1", id}, benchCertValidity)
		if err != nil {
			return fmt.Errorf("bench certificates: %s: %w", id, err)
		}
		if err := os.WriteFile(filepath.Join(dir, id+".pem"), c, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, id+"-key.pem"), k, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// tlsArgs are the agent flags for id's certificate in dir.
func tlsArgs(dir, id string) []string {
	return []string{"--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, id+".pem"),
		"--tls-key", filepath.Join(dir, id+"-key.pem")}
}

// startsSeries is the counter startsSnapshot reads, by its "on" label.
const startsSeries = "tenure_shard_starts_total"

// startsSnapshot is every running agent's tenure_shard_starts_total:
// agent → on → count.
func (c *foCluster) startsSnapshot(ctx context.Context) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.httpAddr+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.id, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: GET /metrics: %s", a.id, resp.Status)
		}
		m, err := ParseLabeledCounter(io.LimitReader(resp.Body, maxMetricsBody), startsSeries, "on")
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.id, err)
		}
		out[a.id] = m
	}
	return out, nil
}

// ParseLabeledCounter reads name{label="v"} N lines of a Prometheus text
// exposition (no other labels): v → N.
func ParseLabeledCounter(r io.Reader, name, label string) (map[string]int, error) {
	out := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := name + "{" + label + `="`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		v, num, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil {
			return nil, fmt.Errorf("%s{%s=%q}: %w", name, label, v, err)
		}
		out[v] = int(f)
	}
	return out, sc.Err()
}

// startsBetween sums each label's increase between two snapshots over the
// agents in both (an agent whose count went down restarted: it counts
// from 0).
func startsBetween(before, after map[string]map[string]int) map[string]int {
	out := map[string]int{"commit": 0, "word": 0}
	for id, m := range after {
		for v, n := range m {
			b := before[id][v]
			if n < b {
				b = 0
			}
			out[v] += n - b
		}
	}
	return out
}
