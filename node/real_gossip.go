// The real backend's gossip side: its start (membershipConfig, gossipMeta,
// startGossip), the tags a node gossips (group, partitions,
// weight, zone, voter preference, health, load) and how they are read back,
// the member list, and the loop that wakes the node on membership changes.

package node

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// healthTagPrefix marks health metadata inside the gossiped tags.
const healthTagPrefix = "health."

// groupTag carries the node's group in the gossiped tags. cluster.Meta's
// Group is the gossip boundary (nodes of another Meta.Group are refused),
// so it holds Config.Cluster, and the node's group travels here.
const groupTag = "tenure.group"

// partitionsTag carries Config.Partitions in the gossiped tags: every node
// of a cluster must hash keys onto the same shards, so gossip refuses a
// peer that gossips another count (cluster.Config.CheckPeer).
const partitionsTag = "tenure.partitions"

// weightTag and zoneTag carry Config.Weight and Config.Zone in the
// gossiped tags (ownership.Member.Weight and Zone); absent means weight 1
// and no zone.
const (
	weightTag = "tenure.weight"
	zoneTag   = "tenure.zone"
)

// gossipedWeight reads a member's weight tag: 0 (weight 1) when absent or
// not a number in 1..MaxWeight (a peer's tags are outside input).
func gossipedWeight(tags map[string]string) int {
	w, err := strconv.Atoi(tags[weightTag])
	if err != nil || w < 1 || w > MaxWeight {
		return 0
	}
	return w
}

// voterShardsTag, set to "no", carries Config.VoterOwnsNoShards in the
// gossiped tags: the leader's planner gives such a node no shards while
// it is a voter (ownership.Member.NoShards). The voter preference travels
// in cluster.TagVoter.
const voterShardsTag = "tenure.voter-shards"

// ownsNoShards reports whether a member with these tags asks to own no
// shards, given whether it is a control-group voter now.
func ownsNoShards(tags map[string]string, voter bool) bool {
	return voter && tags[voterShardsTag] == "no"
}

// keyringFileName is the gossip keyring kept in DataDir (cluster.Config
// KeyringFile).
const keyringFileName = "gossip.keyring"

// keyringFileExists reports whether dataDir holds a gossip keyring.
func keyringFileExists(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, keyringFileName))
	return err == nil
}

// checkPartitions is the gossip CheckPeer of a node with partitions
// shards: a peer gossiping another count is refused. Peers that gossip
// none (an older release) are admitted.
func checkPartitions(partitions int) func(cluster.Meta) error {
	want := strconv.Itoa(partitions)
	return func(m cluster.Meta) error {
		if got, ok := m.Tags[partitionsTag]; ok && got != want {
			return fmt.Errorf("it has %s partitions, this node %s: every node of a cluster needs the same Partitions", got, want)
		}
		return nil
	}
}

// membershipLoop wakes the leader loop and the node on gossip changes.
func (b *netBackend) membershipLoop() {
	sub := b.gossip.Subscribe(16)
	defer sub.Close()
	for {
		select {
		case <-b.ctx.Done():
			return
		case _, ok := <-sub.C():
			if !ok {
				return
			}
			b.loop.Notify()
			b.notify()
		}
	}
}

func (b *netBackend) members() []Member {
	st := b.fsm.State()
	leader := b.ctl.Leader()
	voters := b.ctl.Voters()
	seen := b.lastRenewals(st, leader)
	unproven := map[string]bool{}
	if u, ok := b.ctl.(interface{ Unproven() []string }); ok {
		for _, id := range u.Unproven() {
			unproven[id] = true
		}
	}
	var out []Member
	for _, m := range b.gossip.Members() {
		rec, known := st.Node(m.ID)
		mm := Member{
			ID: m.ID, Group: firstNonEmpty(m.Tags[groupTag], m.Group), Incarnation: m.Incarnation, Addr: m.Addr, RaftAddr: m.RaftAddr,
			HTTPAddr: m.HTTPAddr, State: m.State, Health: m.Health, Draining: m.Draining || rec.Draining,
			Live:  known && ownership.UpAtRegistered(rec, m.State, m.Incarnation),
			Voter: slices.Contains(voters, m.ID), Leader: m.ID == leader, Version: m.Version,
		}
		mm.NoShards = ownsNoShards(m.Tags, mm.Voter)
		mm.Weight, mm.Zone = max(gossipedWeight(m.Tags), 1), m.Tags[zoneTag]
		mm.Excluded = st.IsExcluded(m.ID)
		mm.Unproven = unproven[m.ID+"@"+m.RaftAddr]
		mm.Load = parseLoad(m.Tags[loadTag])
		switch {
		case seen != nil:
			mm.UpdatedAt = seen[m.ID] // zero: unknown here
		case known && rec.HeartbeatAt != 0:
			mm.UpdatedAt = time.Unix(0, rec.HeartbeatAt)
		}
		for k, v := range m.Tags {
			if strings.HasPrefix(k, "tenure.") { // reserved: groupTag, partitionsTag, TagClaiming, TagVoter...
				continue
			}
			if meta, ok := strings.CutPrefix(k, healthTagPrefix); ok {
				if mm.Metadata == nil {
					mm.Metadata = make(map[string]string)
				}
				mm.Metadata[meta] = v
				continue
			}
			if mm.Tags == nil {
				mm.Tags = make(map[string]string)
			}
			mm.Tags[k] = v
		}
		out = append(out, mm)
	}
	return out
}

// lastRenewals is, under cluster version 4, when each member last renewed
// as far as this node knows: its own last acknowledged renewal, and on the
// leader the renewals it accepted. Followers do not see others' renewals
// (they are not on the log): those stay zero. nil before version 4 (the
// committed heartbeat time is then the truth).
func (b *netBackend) lastRenewals(st *ledger.State, leader string) map[string]time.Time {
	if st.ActiveVersion() < ledger.VersionLeaseRenewals {
		return nil
	}
	out := map[string]time.Time{}
	if leader == b.id {
		b.renewMu.Lock()
		for id, t := range b.renewSeen {
			out[id] = t
		}
		b.renewMu.Unlock()
	}
	b.mu.Lock()
	if !b.closed {
		out[b.id] = b.agent.Status().LastAck
	}
	b.mu.Unlock()
	return out
}

func (b *netBackend) liveNodes() []string {
	var out []string
	for _, m := range b.members() {
		if m.Live {
			out = append(out, m.ID)
		}
	}
	return out
}

func (b *netBackend) setLoad(summary string) error {
	return b.gossip.UpdateMeta(func(m *cluster.Meta) {
		if m.Tags == nil {
			m.Tags = make(map[string]string)
		}
		m.Tags[loadTag] = summary
	})
}

func (b *netBackend) setHealth(score float64, meta map[string]string) error {
	return b.gossip.UpdateMeta(func(m *cluster.Meta) {
		m.Health = score
		for k := range m.Tags {
			if strings.HasPrefix(k, healthTagPrefix) {
				delete(m.Tags, k)
			}
		}
		if len(meta) > 0 && m.Tags == nil {
			m.Tags = make(map[string]string)
		}
		for k, v := range meta {
			m.Tags[healthTagPrefix+k] = v
		}
	})
}

// membershipConfig maps a node profile to the gossip configuration.
func membershipConfig(cfg Config) (cluster.Config, error) {
	row, _ := cfg.Profile.row()
	mc := row.membership()
	mc.Name = cfg.NodeID
	mc.ClusterLabel = cfg.Cluster
	host, port, err := splitHostPort(cfg.GossipAddr)
	if err != nil {
		return mc, fmt.Errorf("GossipAddr: %w", err)
	}
	mc.BindAddr, mc.BindPort = host, port
	if cfg.GossipAdvertise != "" {
		host, port, err := splitHostPort(cfg.GossipAdvertise)
		if err != nil {
			return mc, fmt.Errorf("GossipAdvertise: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	mc.Seeds = slices.Clone(cfg.Seeds)
	if len(cfg.EncryptionKey) > 0 {
		mc.SecretKeys = [][]byte{slices.Clone(cfg.EncryptionKey)}
	}
	if cfg.DataDir != "" && cfg.Network == nil {
		mc.KeyringFile = filepath.Join(cfg.DataDir, keyringFileName)
	}
	mc.CheckPeer = checkPartitions(cfg.Partitions)
	if cfg.Logger != nil {
		mc.Logger = cfg.Logger.With("component", "gossip")
	}
	return mc, nil
}

// gossipMeta is what this node first gossips about itself.
func gossipMeta(cfg Config, id string, inc uint64) cluster.Meta {
	meta := cluster.Meta{
		ID: id, Group: cfg.Cluster, Incarnation: inc, Health: 1,
		RaftAddr: firstNonEmpty(cfg.RaftAdvertise, cfg.RaftAddr), HTTPAddr: cfg.HTTPAddr,
		Version: "tenure", Tags: maps.Clone(cfg.Tags),
	}
	if meta.Tags == nil {
		meta.Tags = make(map[string]string)
	}
	meta.Tags[groupTag] = cfg.Group
	meta.Tags[partitionsTag] = strconv.Itoa(cfg.Partitions)
	if cfg.Voter != "" && cfg.Voter != VoterAuto {
		meta.Tags[cluster.TagVoter] = string(cfg.Voter)
	}
	// This binary follows the committed-state stream when out of Raft
	// (cluster version 5): the leader may keep it out.
	meta.Tags[cluster.TagStream] = "1"
	if cfg.VoterOwnsNoShards {
		meta.Tags[voterShardsTag] = "no"
	}
	if cfg.Weight > 1 {
		meta.Tags[weightTag] = strconv.Itoa(cfg.Weight)
	}
	if cfg.Zone != "" {
		meta.Tags[zoneTag] = cfg.Zone
	}
	// Until ClaimID finds no other live process with this id, peers never
	// take this instance for the node (cluster.TagClaiming).
	meta.Tags[cluster.TagClaiming] = "1"
	return meta
}

// startGossip starts the membership (not yet joined) and returns the meta
// it gossips.
func (b *netBackend) startGossip(cleanup *[]func()) (cluster.Meta, error) {
	mc, err := membershipConfig(b.cfg)
	if err != nil {
		return cluster.Meta{}, err
	}
	if err := b.cfg.Network.attachGossip(&mc, b.cfg, cleanup); err != nil {
		return cluster.Meta{}, err
	}
	meta := gossipMeta(b.cfg, b.id, b.inc)
	b.gossip, err = cluster.NewMembership(mc, meta)
	if err != nil {
		return cluster.Meta{}, fmt.Errorf("node: gossip: %w", err)
	}
	*cleanup = append(*cleanup, func() { _ = b.gossip.Shutdown() })
	return meta, nil
}
