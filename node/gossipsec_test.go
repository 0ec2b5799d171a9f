package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGossipKeyRequiredOffLoopback: a gossip port reachable from other
// hosts needs a key (or Insecure); loopback does not.
func TestGossipKeyRequiredOffLoopback(t *testing.T) {
	base := func() Config {
		c := ConfigFromEnv(func(string) string { return "" })
		c.NodeID = "n1"
		c.DataDir = t.TempDir()
		c.RaftAddr = "127.0.0.1:7947"
		return c
	}
	key := bytes.Repeat([]byte{7}, 32)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"loopback", func(c *Config) { c.GossipAddr = "127.0.0.1:7946" }, true},
		{"wildcard", func(c *Config) { c.GossipAddr = "0.0.0.0:7946" }, false},
		{"lan", func(c *Config) { c.GossipAddr = "10.0.0.5:7946" }, false},
		{"loopback bind, lan advertise", func(c *Config) { c.GossipAddr = "127.0.0.1:7946"; c.GossipAdvertise = "10.0.0.5:7946" }, false},
		{"lan with key", func(c *Config) { c.GossipAddr = "10.0.0.5:7946"; c.EncryptionKey = key }, true},
		{"lan insecure", func(c *Config) { c.GossipAddr = "10.0.0.5:7946"; c.Insecure = true }, true},
		{"lan with keyring file", func(c *Config) {
			c.GossipAddr = "10.0.0.5:7946"
			if err := os.WriteFile(filepath.Join(c.DataDir, keyringFileName), []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mod(&c)
			err := c.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tc.ok && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "EncryptionKey")) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig naming EncryptionKey", err)
			}
		})
	}
}

// TestReservedTags: tags that would overwrite the node's own gossip
// metadata are refused.
func TestReservedTags(t *testing.T) {
	for _, k := range []string{"tenure.partitions", "tenure.group", "tenure.voter", "tenure.voter-shards", "health.db"} {
		c := ConfigFromEnv(func(string) string { return "" })
		c.NodeID, c.DataDir = "n1", t.TempDir()
		c.Tags = map[string]string{k: "x"}
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("tag %q: Validate = %v, want ErrInvalidConfig", k, err)
		}
	}
}

// TestPartitionMismatchRefused: a node configured with another partition
// count than the cluster it joins fails Start with ErrClusterMismatch
// instead of joining and hanging, and the cluster never lists it.
func TestPartitionMismatchRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	tc := newCluster(t, 1, nil)
	ports := freePorts(t, 2)
	cfg := tc.cfgs[0]
	cfg.NodeID = "odd"
	cfg.DataDir = t.TempDir()
	cfg.Partitions = 32 // the cluster has 16
	cfg.BootstrapExpect = 0
	cfg.GossipAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.Seeds = []string{tc.cfgs[0].GossipAddr}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err == nil {
		_ = n.Close(ctx)
		t.Fatal("a node with 32 partitions joined a cluster of 16")
	}
	if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), "partitions") {
		t.Fatalf("Start = %v, want ErrClusterMismatch naming the partitions", err)
	}
	for _, m := range tc.nodes[0].Members() {
		if m.ID == "odd" {
			t.Fatalf("the cluster lists the refused node: %+v", m)
		}
	}
}

// TestGossipKeyRotation rotates the gossip key of a running three-node
// cluster in the three rounds docs/security.md gives, restarts a node, and
// checks that it comes back with the rotated keyring (kept in DataDir)
// although its configured EncryptionKey is the old one, and rejoins.
func TestGossipKeyRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	tc := newCluster(t, 3, func(_ int, c *Config) { c.EncryptionKey = oldKey })
	round := func(name string, op func(*Node) error) {
		t.Helper()
		for _, n := range tc.nodes {
			if err := op(n); err != nil {
				t.Fatalf("%s on %s: %v", name, n.ID(), err)
			}
		}
	}
	round("install", func(n *Node) error { return n.InstallGossipKey(newKey) })
	round("use", func(n *Node) error { return n.UseGossipKey(newKey) })
	if err := tc.nodes[0].RemoveGossipKey(newKey); !errors.Is(err, ErrInvalid) {
		t.Fatalf("removing the primary key: %v, want ErrInvalid", err)
	}
	if err := tc.nodes[0].InstallGossipKey([]byte("short")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("installing a 5-byte key: %v, want ErrInvalid", err)
	}
	round("remove", func(n *Node) error { return n.RemoveGossipKey(oldKey) })
	keys, err := tc.nodes[2].GossipKeys()
	if err != nil || len(keys) != 1 || !keys[0].Primary || keys[0].Fingerprint != KeyFingerprint(newKey) {
		t.Fatalf("GossipKeys = %+v, %v; want only the new key, primary", keys, err)
	}

	ctx := tc.ctx()
	if err := tc.nodes[2].Close(ctx); err != nil {
		t.Fatalf("close n3: %v", err)
	}
	tc.nodes[2] = nil
	n3, err := tc.start(2) // configured with oldKey: the keyring file wins
	if err != nil {
		t.Fatalf("restart n3: %v", err)
	}
	tc.nodes[2] = n3
	keys, err = n3.GossipKeys()
	if err != nil || len(keys) != 1 || keys[0].Fingerprint != KeyFingerprint(newKey) {
		t.Fatalf("after restart GossipKeys = %+v, %v; want the rotated key", keys, err)
	}
	if !waitTrue(ctx, func() bool {
		alive := 0
		for _, m := range tc.nodes[0].Members() {
			if m.State == MemberAlive {
				alive++
			}
		}
		return alive == 3
	}) {
		t.Fatalf("n3 never rejoined after the restart: %+v", tc.nodes[0].Members())
	}
}

// TestVoterConfig: Config.Voter takes auto, always, never (or ""); the
// no-shards flag binds only while the node votes.
func TestVoterConfig(t *testing.T) {
	for _, v := range []VoterPreference{"", VoterAuto, VoterAlways, VoterNever, "sometimes"} {
		c := ConfigFromEnv(func(string) string { return "" })
		c.NodeID, c.DataDir, c.Voter = "n1", t.TempDir(), v
		c.GossipAddr, c.RaftAddr = "127.0.0.1:7946", "127.0.0.1:7947"
		err := c.Validate()
		if ok := v != "sometimes"; ok != (err == nil) {
			t.Errorf("Voter %q: Validate = %v", v, err)
		}
		if v == "sometimes" && !strings.Contains(fmt.Sprint(err), "Voter") {
			t.Errorf("Voter %q: error %v does not name Voter", v, err)
		}
	}
	no := map[string]string{voterShardsTag: "no"}
	for _, tc := range []struct {
		tags  map[string]string
		voter bool
		want  bool
	}{{no, true, true}, {no, false, false}, {nil, true, false}, {map[string]string{voterShardsTag: "yes"}, true, false}} {
		if got := ownsNoShards(tc.tags, tc.voter); got != tc.want {
			t.Errorf("ownsNoShards(%v, voter %v) = %v, want %v", tc.tags, tc.voter, got, tc.want)
		}
	}
}
