package gossip

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/cluster/internal/atomicfile"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Gossip encryption uses memberlist's AES-GCM keyring: the primary key
// encrypts, every installed key is tried to decrypt. Rotation without a
// partition is three rounds, each finished on every node before the next
// starts:
//
//  1. InstallKey(new) on every node (all can now decrypt both keys);
//  2. UseKey(new) on every node (they encrypt with it);
//  3. RemoveKey(old) on every node.
//
// These methods change only this node's keyring (and its KeyringFile);
// pushing each round to every node is the operator's job (`tenure keyring`
// does it over the HTTP API).

var (
	// ErrBadKeyring: the keyring file is damaged or holds an invalid key.
	ErrBadKeyring = errors.New("cluster: bad keyring file")
	// ErrKeyringOp: the keyring refused an operation (a key of the wrong
	// size, an unknown key, removing the primary key).
	ErrKeyringOp = errors.New("cluster: keyring refused the operation")
)

// maxKeyringFile bounds the keyring file read at start.
const (
	maxKeyringFile = 64 << 10
	maxKeyringKeys = 64
)

// keyringFileFormat is the on-disk keyring: base64 keys, primary first.
type keyringFileFormat struct {
	Keys []string `json:"keys"`
}

// LoadKeyring reads a keyring file written by a Membership (primary
// first). A missing file is (nil, nil); a damaged one is ErrBadKeyring.
func LoadKeyring(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: read keyring: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxKeyringFile+1)); err != nil {
		return nil, fmt.Errorf("cluster: read keyring %s: %w", path, err)
	}
	if buf.Len() > maxKeyringFile {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrBadKeyring, path, maxKeyringFile)
	}
	var kf keyringFileFormat
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kf); err != nil {
		return nil, fmt.Errorf("%w: %s: %v (restore it from another node or remove it to fall back to the configured key)", ErrBadKeyring, path, err)
	}
	if len(kf.Keys) == 0 || len(kf.Keys) > maxKeyringKeys {
		return nil, fmt.Errorf("%w: %s holds %d keys, want 1..%d", ErrBadKeyring, path, len(kf.Keys), maxKeyringKeys)
	}
	keys := make([][]byte, 0, len(kf.Keys))
	for i, s := range kf.Keys {
		k, err := ParseGossipKey(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s key %d: %v", ErrBadKeyring, path, i, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// SaveKeyring writes keys (primary first) to path atomically and durably,
// readable by its owner only.
func SaveKeyring(path string, keys [][]byte) error {
	kf := keyringFileFormat{Keys: make([]string, len(keys))}
	for i, k := range keys {
		kf.Keys[i] = base64.StdEncoding.EncodeToString(k)
	}
	b, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Dir(path), filepath.Base(path), append(b, '\n'))
}

// ParseGossipKey decodes a base64 gossip key of 16, 24 or 32 bytes.
func ParseGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	if n := len(k); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("gossip key is %d bytes, want 16, 24 or 32", n)
	}
	return k, nil
}

// InstallKey adds key (16, 24 or 32 bytes) to the keyring without making it
// primary.
func (m *Membership) InstallKey(key []byte) error {
	return m.keyringOp("install", func() error { return m.keyring.AddKey(key) })
}

// UseKey makes an installed key the primary (encrypting) key.
func (m *Membership) UseKey(key []byte) error {
	return m.keyringOp("use", func() error { return m.keyring.UseKey(key) })
}

// RemoveKey removes a key that is not the primary.
func (m *Membership) RemoveKey(key []byte) error {
	return m.keyringOp("remove", func() error { return m.keyring.RemoveKey(key) })
}

// keyringOp runs op and persists the result; one at a time, so the file
// always matches the keyring of the last finished op.
func (m *Membership) keyringOp(name string, op func() error) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	m.keyringMu.Lock()
	defer m.keyringMu.Unlock()
	if err := op(); err != nil {
		return fmt.Errorf("%w: %s key: %w", ErrKeyringOp, name, err)
	}
	if m.cfg.KeyringFile != "" {
		if err := SaveKeyring(m.cfg.KeyringFile, m.keyring.GetKeys()); err != nil {
			return fmt.Errorf("cluster: %s key: applied but not saved (it is lost on restart): %w", name, err)
		}
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
