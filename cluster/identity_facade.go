package cluster

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/tenurehq/tenure/cluster/identity"
	"github.com/tenurehq/tenure/cluster/internal/atomicfile"
)

// This file is the facade of the identity concern, which lives in
// cluster/identity: this node's id and incarnation on disk, the roles a
// peer's certificate proves, the deny-list check and the Raft message
// guard. The names the rest of the module imports from cluster stay here as
// aliases of the one definition there (errors.Is matches the same values).

// Identity types.
type (
	Identity = identity.Identity
	Role     = identity.Role
	Peer     = identity.Peer
)

// The roles.
const (
	RoleNone     = identity.RoleNone
	RoleNode     = identity.RoleNode
	RoleMember   = identity.RoleMember
	RoleOperator = identity.RoleOperator
)

// Identity errors (the same values as identity's).
var (
	ErrPeerRevoked = identity.ErrPeerRevoked
)

// DefaultMaxInstallSnapshot bounds one InstallSnapshot stream when
// ControlConfig.MaxInstallSnapshot is 0: the largest snapshot the
// committed-state stream serves or accepts (DefaultStreamMaxSnapshot; the
// node sets ledger.MaxSnapshotSize, the largest snapshot a replica
// restores).
const DefaultMaxInstallSnapshot = DefaultStreamMaxSnapshot

// LoadIdentity is identity.LoadIdentity.
func LoadIdentity(dataDir, defaultID string) (Identity, error) {
	return identity.LoadIdentity(dataDir, defaultID)
}

// HasIdentity is identity.HasIdentity.
func HasIdentity(dataDir string) (bool, error) { return identity.HasIdentity(dataDir) }

// ValidateNodeID is identity.ValidateNodeID.
func ValidateNodeID(id string) error { return identity.ValidateNodeID(id) }

// TLSAuthenticator is identity.TLSAuthenticator.
func TLSAuthenticator(peerOf func(tls.ConnectionState) (Peer, error)) func(context.Context, net.Conn) (Peer, error) {
	return identity.TLSAuthenticator(peerOf)
}

// WriteFileAtomic replaces dir/name atomically and durably (temp file,
// fsync, rename, fsync of dir), readable by its owner only. The node keeps
// its small state files with it.
func WriteFileAtomic(dir, name string, data []byte) error { return atomicfile.Write(dir, name, data) }
