package cluster

import "fmt"

// Gossip encryption uses memberlist's AES-GCM keyring: the primary key
// encrypts, every installed key is tried to decrypt. Rotation without a
// partition is three rounds, each finished on every node before the next
// starts:
//
//  1. InstallKey(new) on every node (all can now decrypt both keys);
//  2. UseKey(new) on every node (they encrypt with it);
//  3. RemoveKey(old) on every node.
//
// These methods change only this node's keyring; pushing each round to
// every node is the operator's (or the control group's) job.

// InstallKey adds key (16, 24 or 32 bytes) to the keyring without making it
// primary.
func (m *Membership) InstallKey(key []byte) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	if err := m.keyring.AddKey(key); err != nil {
		return fmt.Errorf("cluster: install key: %w", err)
	}
	return nil
}

// UseKey makes an installed key the primary (encrypting) key.
func (m *Membership) UseKey(key []byte) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	if err := m.keyring.UseKey(key); err != nil {
		return fmt.Errorf("cluster: use key: %w", err)
	}
	return nil
}

// RemoveKey removes a key that is not the primary.
func (m *Membership) RemoveKey(key []byte) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	if err := m.keyring.RemoveKey(key); err != nil {
		return fmt.Errorf("cluster: remove key: %w", err)
	}
	return nil
}

// Keys returns the installed keys, primary first (nil without encryption).
func (m *Membership) Keys() [][]byte {
	if m.keyring == nil {
		return nil
	}
	return m.keyring.GetKeys()
}
