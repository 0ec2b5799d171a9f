package node

import (
	"encoding/base64"
	"flag"
	"fmt"
	"strings"
)

// RegisterFlags binds c's fields to command-line flags on fs, with c's
// current values as defaults (start from DefaultConfig). Flag names are
// -node-id, -group, -cluster, -seeds (comma-separated), -bootstrap-expect,
// -data-dir, -profile, -partitions, -min-health, -gossip-addr,
// -gossip-advertise, -raft-addr, -raft-advertise, -http-addr,
// -encrypt-key (base64) and -job-timeout. Call Validate after parsing.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "stable node id (default $"+EnvNodeID+")")
	fs.StringVar(&c.Group, "group", c.Group, "node group (default $"+EnvGroup+")")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name: gossip refuses nodes of other clusters")
	fs.Var((*listFlag)(&c.Seeds), "seeds", "comma-separated gossip addresses (host:port) to join")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", c.BootstrapExpect, "control-group voters to wait for before forming the cluster")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for identity, Raft log and snapshots")
	fs.Var((*profileFlag)(&c.Profile), "profile", "lease timing profile: fast, default or safe")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "number of shards (same on every node, forever)")
	fs.Float64Var(&c.MinHealth, "min-health", c.MinHealth, "health score below which a node steps down (0..1)")
	fs.StringVar(&c.GossipAddr, "gossip-addr", c.GossipAddr, "gossip bind address host:port")
	fs.StringVar(&c.GossipAdvertise, "gossip-advertise", c.GossipAdvertise, "gossip address peers use (default: gossip-addr)")
	fs.StringVar(&c.RaftAddr, "raft-addr", c.RaftAddr, "control-group bind address host:port")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", c.RaftAdvertise, "control-group address peers use (required with a wildcard raft-addr)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP API address to advertise (the node does not listen on it)")
	fs.Var((*keyFlag)(&c.EncryptionKey), "encrypt-key", "base64 gossip encryption key (16, 24 or 32 bytes)")
	fs.StringVar(&c.TLSCAFile, "tls-ca", c.TLSCAFile, "PEM file of the cluster CA: with tls-cert and tls-key the control-group port speaks only mutual TLS")
	fs.StringVar(&c.TLSCertFile, "tls-cert", c.TLSCertFile, "PEM file of this node's certificate (must name node-id)")
	fs.StringVar(&c.TLSKeyFile, "tls-key", c.TLSKeyFile, "PEM file of this node's private key")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow a non-loopback control-group port without TLS (anyone who reaches it can commit any command)")
	fs.DurationVar(&c.JobTimeout, "job-timeout", c.JobTimeout, "how long one job attempt may run")
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

type profileFlag Profile

func (p *profileFlag) String() string { return string(*p) }

func (p *profileFlag) Set(v string) error {
	if _, ok := Profile(v).Timing(); !ok {
		return fmt.Errorf("unknown profile %q (want fast, default or safe)", v)
	}
	*p = profileFlag(v)
	return nil
}

type keyFlag []byte

func (k *keyFlag) String() string {
	if len(*k) == 0 {
		return ""
	}
	return "(set)"
}

func (k *keyFlag) Set(v string) error {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("not base64: %v", err)
	}
	*k = b
	return nil
}
