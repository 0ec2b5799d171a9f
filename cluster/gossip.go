package cluster

import "github.com/tenurehq/tenure/cluster/gossip"

// This file is the facade of the gossip concern, which lives in
// cluster/gossip: the names the rest of the module has always imported from
// cluster stay here as aliases of the one definition there. New code may
// import either; the behaviour, errors (errors.Is matches the same values)
// and wire encoding are gossip's.

// Gossip types.
type (
	Config          = gossip.Config
	Membership      = gossip.Membership
	Subscription    = gossip.Subscription
	Meta            = gossip.Meta
	Member          = gossip.Member
	MemberState     = gossip.MemberState
	Event           = gossip.Event
	EventKind       = gossip.EventKind
	MemNetwork      = gossip.MemNetwork
	MemNetworkStats = gossip.MemNetworkStats
	MemTransport    = gossip.MemTransport
)

// Gossip constants.
const (
	ProfileLAN   = gossip.ProfileLAN
	ProfileLocal = gossip.ProfileLocal
	ProfileTest  = gossip.ProfileTest

	StateAlive   = gossip.StateAlive
	StateSuspect = gossip.StateSuspect
	StateDead    = gossip.StateDead
	StateLeft    = gossip.StateLeft

	EventJoin   = gossip.EventJoin
	EventUpdate = gossip.EventUpdate
	EventFailed = gossip.EventFailed
	EventLeave  = gossip.EventLeave
	EventReap   = gossip.EventReap

	MetaMaxSize = gossip.MetaMaxSize
	MetaVersion = gossip.MetaVersion
	TagClaiming = gossip.TagClaiming
)

// Gossip errors (the same values as gossip's).
var (
	ErrMembershipConfig   = gossip.ErrMembershipConfig
	ErrMembershipClosed   = gossip.ErrMembershipClosed
	ErrInvalidMeta        = gossip.ErrInvalidMeta
	ErrMetaTooLarge       = gossip.ErrMetaTooLarge
	ErrForeignCluster     = gossip.ErrForeignCluster
	ErrEncryptionDisabled = gossip.ErrEncryptionDisabled
	ErrIDInUse            = gossip.ErrIDInUse
	ErrBadKeyring         = gossip.ErrBadKeyring
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

// DefaultTestConfig is gossip.DefaultTestConfig.
func DefaultTestConfig() Config { return gossip.DefaultTestConfig() }

// NewMemNetwork is gossip.NewMemNetwork.
func NewMemNetwork(seed int64) *MemNetwork { return gossip.NewMemNetwork(seed) }

// EncodeMeta is gossip.EncodeMeta.
func EncodeMeta(m Meta) ([]byte, error) { return gossip.EncodeMeta(m) }

// DecodeMeta is gossip.DecodeMeta.
func DecodeMeta(b []byte) (Meta, error) { return gossip.DecodeMeta(b) }

// LoadKeyring is gossip.LoadKeyring.
func LoadKeyring(path string) ([][]byte, error) { return gossip.LoadKeyring(path) }

// SaveKeyring is gossip.SaveKeyring.
func SaveKeyring(path string, keys [][]byte) error { return gossip.SaveKeyring(path, keys) }

// ParseGossipKey is gossip.ParseGossipKey.
func ParseGossipKey(s string) ([]byte, error) { return gossip.ParseGossipKey(s) }
