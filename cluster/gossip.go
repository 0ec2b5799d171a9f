package cluster

import "github.com/tenurehq/tenure/cluster/gossip"

// This file is the facade of the gossip concern, which lives in
// cluster/gossip: the names the rest of the module imports from cluster
// stay here as aliases of the one definition there (the names nothing
// outside cluster/ used were folded: import cluster/gossip for the rest).
// The behaviour, errors (errors.Is matches the same values) and wire
// encoding are gossip's.

// Gossip types.
type (
	Config       = gossip.Config
	Membership   = gossip.Membership
	Subscription = gossip.Subscription
	Meta         = gossip.Meta
	Member       = gossip.Member
	MemNetwork   = gossip.MemNetwork
)

// Gossip member states, and the tag of a node claiming an incarnation.
const (
	StateAlive   = gossip.StateAlive
	StateSuspect = gossip.StateSuspect
	StateDead    = gossip.StateDead
	TagClaiming  = gossip.TagClaiming
)

// Gossip errors (the same values as gossip's).
var (
	ErrForeignCluster     = gossip.ErrForeignCluster
	ErrEncryptionDisabled = gossip.ErrEncryptionDisabled
	ErrIDInUse            = gossip.ErrIDInUse
	ErrKeyringOp          = gossip.ErrKeyringOp
)

// NewMembership is gossip.NewMembership.
func NewMembership(cfg Config, meta Meta) (*Membership, error) {
	return gossip.NewMembership(cfg, meta)
}

// DefaultLANConfig is gossip.DefaultLANConfig.
func DefaultLANConfig() Config { return gossip.DefaultLANConfig() }

// DefaultLocalConfig is gossip.DefaultLocalConfig.
func DefaultLocalConfig() Config { return gossip.DefaultLocalConfig() }

// NewMemNetwork is gossip.NewMemNetwork.
func NewMemNetwork(seed int64) *MemNetwork { return gossip.NewMemNetwork(seed) }

// ParseGossipKey is gossip.ParseGossipKey.
func ParseGossipKey(s string) ([]byte, error) { return gossip.ParseGossipKey(s) }
