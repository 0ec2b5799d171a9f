package node

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// RegisterFlags binds c's fields to command-line flags on fs, with c's
// current values as defaults (start from DefaultConfig). Flag names are
// -node-id, -group, -cluster, -seeds (comma-separated), -bootstrap-expect,
// -data-dir, -profile, -partitions, -min-health, -gossip-addr,
// -gossip-advertise, -raft-addr, -raft-advertise, -http-addr,
// -encrypt-key (base64), -tls-ca, -tls-cert, -tls-key, -insecure,
// -voter, -voters-own-shards (the inverse of VoterOwnsNoShards), -standbys, -tags
// (comma-separated k=v), -job-timeout, -max-pending-jobs and
// -manual-finalize. `tenure agent` builds its flags, TENURE_* variables and
// config-file keys from these. Call Validate after parsing.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "stable node id (default $"+EnvNodeID+")")
	fs.StringVar(&c.Group, "group", c.Group, "group the node belongs to, for group-scoped elections (default $"+EnvGroup+", else \""+DefaultGroup+"\")")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name: gossip refuses nodes of other clusters (default \""+DefaultCluster+"\")")
	fs.Var((*listFlag)(&c.Seeds), "seeds", "comma-separated gossip addresses (host:port) of nodes to join")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", c.BootstrapExpect, "control-group voters that must see each other before the cluster forms (1 = single node; 3 or 5 in production)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the node's identity, Raft log and snapshots (none with --diskless)")
	fs.BoolVar(&c.Diskless, "diskless", c.Diskless, "run as a disk-less member: no data dir, the ledger replica rebuilt from the voters and a new incarnation from the control group at every start; needs --voter=never and a cluster at version 3 (docs/operations.md)")
	fs.Var((*profileFlag)(&c.Profile), "profile", "lease timing profile: fast, default or safe")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "number of shards (the same on every node, for the cluster's life)")
	fs.Float64Var(&c.MinHealth, "min-health", c.MinHealth, "health score (0..1) below which the node gives its shards up")
	fs.StringVar(&c.GossipAddr, "gossip-addr", c.GossipAddr, "host:port the gossip transport binds")
	fs.StringVar(&c.GossipAdvertise, "gossip-advertise", c.GossipAdvertise, "host:port other nodes reach gossip at (default: gossip-addr)")
	fs.StringVar(&c.RaftAddr, "raft-addr", c.RaftAddr, "host:port the Raft transport binds")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", c.RaftAdvertise, "host:port other nodes reach Raft at (required with a wildcard raft-addr)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP API address to advertise (the node does not listen on it)")
	fs.Var((*keyFlag)(&c.EncryptionKey), "encrypt-key", "base64 gossip encryption key of 16, 24 or 32 bytes (same on every node)")
	fs.StringVar(&c.TLSCAFile, "tls-ca", c.TLSCAFile, "PEM file of the cluster's CA (bundle): with tls-cert and tls-key the Raft/RPC port speaks only mutual TLS (`tenure tls init`); required off loopback unless insecure")
	fs.StringVar(&c.TLSCertFile, "tls-cert", c.TLSCertFile, "PEM file of this node's certificate (its node id in the certificate must equal node-id); re-read when it changes")
	fs.StringVar(&c.TLSKeyFile, "tls-key", c.TLSKeyFile, "PEM file of this node's private key; re-read when it changes")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow a non-loopback Raft/RPC port without TLS: anyone who reaches it can commit any command (logged loudly)")
	fs.Var((*voterFlag)(&c.Voter), "voter", "this node's place in the control group: auto (promoted when voters are needed, lowest id first), always (bootstrap voter and promoted first) or never (never votes: for members beside a fixed voter set)")
	fs.Var((*notFlag)(&c.VoterOwnsNoShards), "voters-own-shards", "false: while this node is a control-group voter it owns no shards, so a voter's death is never also an owner failure (set it on every node that may vote; costs the voters' capacity)")
	fs.IntVar(&c.Standbys, "standbys", c.Standbys, "voter-capable nodes the control-group leader keeps as Raft non-voters once members follow the committed-state stream (cluster version 5), for a quick voter replacement; the others follow the stream (0: 2, negative: none)")
	fs.Var((*tagsFlag)(&c.Tags), "tags", "comma-separated key=value labels gossiped with the node")
	fs.IntVar(&c.Weight, "weight", c.Weight, "the node's capacity relative to the others, 1..1000: its share of the partitions is proportional to it (0: 1)")
	fs.StringVar(&c.Zone, "zone", c.Zone, "the node's failure domain (rack, availability zone): partitions are apportioned to zones by capacity and a group's elections spread across zones")
	fs.DurationVar(&c.JobTimeout, "job-timeout", c.JobTimeout, "how long one job attempt may run before the shard's owner may retry it")
	fs.IntVar(&c.MaxPendingJobs, "max-pending-jobs", c.MaxPendingJobs, "pending jobs one shard may hold: enqueues beyond it are refused (decided by the ledger from cluster version 5, exact; before, checked by this node before proposing; 0: no cap)")
	fs.DurationVar(&c.FencedAfter, "fenced-after", c.FencedAfter, "shards under fenced takeover (tenure fenced) move to a successor once the leader has not heard from their owner this long, without waiting out its lease (0: 3 heartbeat periods)")
	fs.BoolVar(&c.ManualFinalize, "manual-finalize", c.ManualFinalize, "after a rolling upgrade, keep the cluster version until `tenure upgrade finalize` (a window to go back to the previous binary); by default the leader finalizes once every live node runs the new binary")
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

// keyFlag is a base64 key; its value is never printed.
type keyFlag []byte

func (k *keyFlag) String() string {
	if len(*k) == 0 {
		return ""
	}
	return "<redacted>"
}

func (k *keyFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		*k = nil
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return errors.New("not valid base64 (generate one with `head -c 32 /dev/urandom | base64`)")
	}
	if n := len(b); !gossipKeySize(n) {
		return fmt.Errorf("decodes to %d bytes, want 16, 24 or 32", n)
	}
	*k = b
	return nil
}

// voterFlag is a VoterPreference; Validate names a bad one.
type voterFlag VoterPreference

func (v *voterFlag) String() string { return string(*v) }

func (v *voterFlag) Set(s string) error {
	*v = voterFlag(strings.TrimSpace(s))
	return nil
}

// notFlag is a boolean flag that sets the negation of its field.
type notFlag bool

func (b *notFlag) String() string { return strconv.FormatBool(!bool(*b)) }

func (b *notFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q: want true or false", s)
	}
	*b = notFlag(!v)
	return nil
}

func (b *notFlag) IsBoolFlag() bool { return true }

// tagsFlag is a comma-separated list of key=value pairs.
type tagsFlag map[string]string

func (t *tagsFlag) String() string {
	keys := make([]string, 0, len(*t))
	for k := range *t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + (*t)[k]
	}
	return strings.Join(parts, ",")
}

func (t *tagsFlag) Set(s string) error {
	m := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("tag %q: want key=value", part)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	*t = m
	return nil
}
