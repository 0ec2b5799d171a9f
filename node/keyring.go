package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/cluster"
)

// GossipKey describes one key of this node's gossip keyring. The key itself
// is never returned: Fingerprint names it (the first 8 bytes of its
// SHA-256, hex).
type GossipKey struct {
	Fingerprint string `json:"fingerprint"`
	Primary     bool   `json:"primary"`
}

// KeyFingerprint returns the fingerprint GossipKeys reports for key.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// ParseGossipKey decodes a base64 gossip key of 16, 24 or 32 bytes (what
// GossipKeyOp takes).
func ParseGossipKey(s string) ([]byte, error) { return cluster.ParseGossipKey(s) }

// gossipKeySize reports whether a gossip key of n bytes is valid: AES-128,
// -192 or -256 (16, 24 or 32 bytes), what memberlist's keyring accepts.
func gossipKeySize(n int) bool { return n == 16 || n == 24 || n == 32 }

// keyringBackend is the part of a backend that owns a gossip keyring.
type keyringBackend interface {
	gossipKeyring() (*cluster.Membership, error)
}

func (n *Node) keyring() (*cluster.Membership, error) {
	kb, ok := n.be.(keyringBackend)
	if !ok {
		return nil, fmt.Errorf("%w: gossip keyring on an in-memory network", ErrUnsupported)
	}
	return kb.gossipKeyring()
}

// GossipKeys lists this node's gossip keys, primary first. Rotation is three
// rounds, each done on every node before the next (docs/security.md):
// InstallGossipKey(new), UseGossipKey(new), RemoveGossipKey(old); the
// keyring is kept in DataDir, so a restarted node keeps the last rotation.
// A node started without EncryptionKey has no keyring (ErrUnsupported).
func (n *Node) GossipKeys() ([]GossipKey, error) {
	m, err := n.keyring()
	if err != nil {
		return nil, err
	}
	keys := m.Keys()
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: gossip encryption is off (start the node with a key to rotate keys)", ErrUnsupported)
	}
	out := make([]GossipKey, len(keys))
	for i, k := range keys {
		out[i] = GossipKey{Fingerprint: KeyFingerprint(k), Primary: i == 0}
	}
	return out, nil
}

// InstallGossipKey adds key (16, 24 or 32 bytes) to this node's keyring;
// the node decrypts with it but still encrypts with its primary key.
func (n *Node) InstallGossipKey(key []byte) error {
	return n.keyringOp(key, (*cluster.Membership).InstallKey)
}

// UseGossipKey makes an installed key the one this node encrypts with.
func (n *Node) UseGossipKey(key []byte) error {
	return n.keyringOp(key, (*cluster.Membership).UseKey)
}

// RemoveGossipKey removes a key that is not the primary.
func (n *Node) RemoveGossipKey(key []byte) error {
	return n.keyringOp(key, (*cluster.Membership).RemoveKey)
}

func (n *Node) keyringOp(key []byte, op func(*cluster.Membership, []byte) error) error {
	if l := len(key); !gossipKeySize(l) {
		return fmt.Errorf("%w: gossip key of %d bytes, want 16, 24 or 32", ErrInvalid, l)
	}
	m, err := n.keyring()
	if err != nil {
		return err
	}
	if err := op(m, key); err != nil {
		if errors.Is(err, cluster.ErrEncryptionDisabled) {
			return fmt.Errorf("%w: gossip encryption is off (start the node with a key to rotate keys)", ErrUnsupported)
		}
		if errors.Is(err, cluster.ErrKeyringOp) {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return err
	}
	return nil
}

func (b *netBackend) gossipKeyring() (*cluster.Membership, error) { return b.gossip, nil }
