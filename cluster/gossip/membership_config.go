package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profile names reported in Config.Profile.
const (
	ProfileLAN   = "lan"
	ProfileLocal = "local"
	ProfileTest  = "test"
)

// Config configures gossip membership. Start from one of the profiles
// (DefaultLANConfig, DefaultLocalConfig, DefaultTestConfig), then set Name
// and the addresses. NewMembership calls Validate.
type Config struct {
	// Name is the node id. It must equal Meta.ID (or Meta.ID is left empty
	// and filled from it). The memberlist node name is Name + "#" + a random
	// per-process suffix, so a restarted process (same id, any address) is a
	// new gossip instance and is accepted at once; see docs/membership.md.
	Name string
	// Profile names the profile the timings came from (informational).
	Profile string

	// BindAddr/BindPort is where the real UDP+TCP transport listens
	// (BindPort 0 picks a free port). Ignored when Transport is set.
	BindAddr string
	BindPort int
	// AdvertiseAddr/AdvertisePort is what peers are told; empty/0 means
	// the bound address.
	AdvertiseAddr string
	AdvertisePort int

	// ClusterLabel is stamped on every gossip packet and stream
	// (memberlist Label): traffic with another label is dropped and logged.
	// Meta.Group is checked on top of it (alive and merge delegates).
	ClusterLabel string
	// CheckPeer, if set, vets every peer's metadata after the group check
	// (alive and merge delegates): an error refuses the peer as if it were
	// of another cluster (ErrForeignCluster), and a Join whose every seed
	// was refused for it returns that error. Use it for settings that must
	// agree cluster-wide (the node layer checks the partition count). It
	// runs under memberlist's locks: it must be quick and must not block.
	CheckPeer func(Meta) error
	// Seeds are gossip addresses (host:port) joined by Join(ctx, nil) and
	// re-joined every RejoinInterval.
	Seeds []string
	// SecretKeys enables AES-GCM encryption: 16, 24 or 32 byte keys, the
	// first is the primary (used to encrypt); all are tried to decrypt.
	// Empty means no encryption.
	SecretKeys [][]byte
	// KeyringFile, if set, keeps the keyring across restarts: InstallKey,
	// UseKey and RemoveKey rewrite it (atomically, fsync'd, mode 0600), and
	// when it exists at NewMembership its keys replace SecretKeys (the
	// file is what the last rotation left; a changed SecretKeys is logged
	// and ignored). A damaged file is an error, never a silent reset.
	KeyringFile string

	// Failure detector and gossip timings (see memberlist.Config).
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	IndirectChecks          int
	RetransmitMult          int
	GossipInterval          time.Duration
	GossipNodes             int
	GossipToTheDeadTime     time.Duration
	PushPullInterval        time.Duration
	TCPTimeout              time.Duration
	// DeadNodeReclaimTime lets a dead memberlist name come back at a new
	// address after this long (a safety net: instance names are unique per
	// process anyway).
	DeadNodeReclaimTime time.Duration

	// RejoinInterval is how often seeds that are not alive members, and one
	// failed member, are re-joined so partitions heal after peers were
	// reaped. 0 disables it.
	RejoinInterval time.Duration
	// ReapTimeout is how long a dead or left member stays in Members()
	// before it is forgotten (EventReap).
	ReapTimeout time.Duration
	// UpdateTimeout bounds how long UpdateMeta waits for its broadcast to go
	// out (the update is applied and queued either way).
	UpdateTimeout time.Duration

	// CoalescePeriod and QuiescentPeriod batch membership events as serf
	// does: a batch is delivered CoalescePeriod after its first event, or
	// earlier once no event arrived for QuiescentPeriod. CoalescePeriod 0
	// delivers every change at once.
	CoalescePeriod  time.Duration
	QuiescentPeriod time.Duration

	// Transport replaces the real UDP/TCP transport (e.g. a MemTransport).
	Transport memberlist.NodeAwareTransport
	// Logger receives memberlist's log lines at their level; nil discards.
	Logger *slog.Logger
}

// DefaultLANConfig returns memberlist's LAN timings: a crashed node is
// declared dead in about 5–8 s at small cluster sizes.
func DefaultLANConfig() Config {
	ml := memberlist.DefaultLANConfig()
	return Config{
		Profile:                 ProfileLAN,
		BindAddr:                "0.0.0.0",
		BindPort:                7946,
		ClusterLabel:            "tenure",
		ProbeInterval:           ml.ProbeInterval,
		ProbeTimeout:            ml.ProbeTimeout,
		SuspicionMult:           ml.SuspicionMult,
		SuspicionMaxTimeoutMult: ml.SuspicionMaxTimeoutMult,
		IndirectChecks:          ml.IndirectChecks,
		RetransmitMult:          ml.RetransmitMult,
		GossipInterval:          ml.GossipInterval,
		GossipNodes:             ml.GossipNodes,
		GossipToTheDeadTime:     ml.GossipToTheDeadTime,
		PushPullInterval:        ml.PushPullInterval,
		TCPTimeout:              ml.TCPTimeout,
		DeadNodeReclaimTime:     10 * time.Second,
		RejoinInterval:          30 * time.Second,
		ReapTimeout:             24 * time.Hour,
		UpdateTimeout:           time.Second,
		CoalescePeriod:          500 * time.Millisecond,
		QuiescentPeriod:         100 * time.Millisecond,
	}
}

// DefaultLocalConfig returns fast timings for loopback or a quiet LAN: a
// crashed node is declared dead in about 1–2 s.
func DefaultLocalConfig() Config {
	c := DefaultLANConfig()
	c.Profile = ProfileLocal
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0
	c.ProbeInterval = 250 * time.Millisecond
	c.ProbeTimeout = 150 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 2
	c.IndirectChecks = 2
	c.RetransmitMult = 4
	c.GossipInterval = 50 * time.Millisecond
	c.GossipToTheDeadTime = 10 * time.Second
	c.PushPullInterval = 3 * time.Second
	c.TCPTimeout = 2 * time.Second
	c.DeadNodeReclaimTime = time.Second
	c.RejoinInterval = 2 * time.Second
	c.ReapTimeout = 10 * time.Minute
	c.UpdateTimeout = 250 * time.Millisecond
	c.CoalescePeriod = 100 * time.Millisecond
	c.QuiescentPeriod = 20 * time.Millisecond
	return c
}

// DefaultTestConfig returns very fast timings meant for the in-memory
// transport (MemNetwork), usually inside testing/synctest where time is
// virtual: a crashed node is declared dead in about 0.3–0.6 s of virtual
// time. On a real, loaded network it produces false suspicions.
func DefaultTestConfig() Config {
	c := DefaultLocalConfig()
	c.Profile = ProfileTest
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 50 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.GossipToTheDeadTime = 3 * time.Second
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = 500 * time.Millisecond
	c.DeadNodeReclaimTime = 300 * time.Millisecond
	c.RejoinInterval = 500 * time.Millisecond
	c.ReapTimeout = time.Minute
	c.UpdateTimeout = 100 * time.Millisecond
	c.CoalescePeriod = 50 * time.Millisecond
	c.QuiescentPeriod = 10 * time.Millisecond
	return c
}

// Validate reports every bad value; the error matches ErrMembershipConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrMembershipConfig}, args...)...))
	}
	if c.Name == "" {
		bad("Name (node id) is empty")
	}
	if c.Transport == nil {
		if _, err := netip.ParseAddr(c.BindAddr); err != nil {
			bad("BindAddr %q is not an IP address", c.BindAddr)
		}
		if c.BindPort < 0 || c.BindPort > 65535 {
			bad("BindPort %d outside 0..65535", c.BindPort)
		}
	}
	if c.AdvertiseAddr != "" {
		if _, err := netip.ParseAddr(c.AdvertiseAddr); err != nil {
			bad("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
		}
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		bad("AdvertisePort %d outside 0..65535", c.AdvertisePort)
	}
	if len(c.ClusterLabel) > memberlist.LabelMaxSize {
		bad("ClusterLabel is %d bytes, limit %d", len(c.ClusterLabel), memberlist.LabelMaxSize)
	}
	for i, k := range c.SecretKeys {
		if err := memberlist.ValidateKey(k); err != nil {
			bad("SecretKeys[%d] is %d bytes, want 16, 24 or 32", i, len(k))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval}, {"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval}, {"GossipToTheDeadTime", c.GossipToTheDeadTime},
		{"PushPullInterval", c.PushPullInterval}, {"TCPTimeout", c.TCPTimeout},
		{"DeadNodeReclaimTime", c.DeadNodeReclaimTime}, {"ReapTimeout", c.ReapTimeout},
		{"UpdateTimeout", c.UpdateTimeout},
	} {
		if d.v <= 0 {
			bad("%s %v must be positive", d.name, d.v)
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval && c.ProbeInterval > 0 {
		bad("ProbeTimeout %v must be below ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"SuspicionMult", c.SuspicionMult}, {"SuspicionMaxTimeoutMult", c.SuspicionMaxTimeoutMult},
		{"RetransmitMult", c.RetransmitMult}, {"GossipNodes", c.GossipNodes},
	} {
		if n.v < 1 {
			bad("%s %d must be at least 1", n.name, n.v)
		}
	}
	if c.IndirectChecks < 0 {
		bad("IndirectChecks %d is negative", c.IndirectChecks)
	}
	if c.RejoinInterval < 0 {
		bad("RejoinInterval %v is negative", c.RejoinInterval)
	}
	if c.CoalescePeriod < 0 || c.QuiescentPeriod < 0 {
		bad("CoalescePeriod %v and QuiescentPeriod %v must not be negative", c.CoalescePeriod, c.QuiescentPeriod)
	}
	if c.CoalescePeriod > 0 && (c.QuiescentPeriod == 0 || c.QuiescentPeriod > c.CoalescePeriod) {
		bad("QuiescentPeriod %v must be in (0, CoalescePeriod %v]", c.QuiescentPeriod, c.CoalescePeriod)
	}
	return errors.Join(errs...)
}

// memberlistConfig translates c; name is the memberlist node name.
func (c Config) memberlistConfig(name string) *memberlist.Config {
	ml := memberlist.DefaultLANConfig()
	ml.Name = name
	ml.BindAddr = c.BindAddr
	ml.BindPort = c.BindPort
	ml.AdvertiseAddr = c.AdvertiseAddr
	ml.AdvertisePort = c.AdvertisePort
	if c.AdvertisePort == 0 {
		ml.AdvertisePort = c.BindPort
	}
	ml.Label = c.ClusterLabel
	ml.ProbeInterval = c.ProbeInterval
	ml.ProbeTimeout = c.ProbeTimeout
	ml.SuspicionMult = c.SuspicionMult
	ml.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	ml.IndirectChecks = c.IndirectChecks
	ml.RetransmitMult = c.RetransmitMult
	ml.GossipInterval = c.GossipInterval
	ml.GossipNodes = c.GossipNodes
	ml.GossipToTheDeadTime = c.GossipToTheDeadTime
	ml.PushPullInterval = c.PushPullInterval
	ml.TCPTimeout = c.TCPTimeout
	ml.DeadNodeReclaimTime = c.DeadNodeReclaimTime
	ml.RequireNodeNames = false
	if c.Transport != nil {
		ml.Transport = c.Transport
	}
	return ml
}
