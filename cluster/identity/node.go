package identity

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/cluster/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// Identity is who this process is: a node id that survives restarts and an
// incarnation that grows by one on every process start.
type Identity struct {
	ID          string
	Incarnation uint64
}

// ErrBadIdentity: a node id or identity file is invalid.
var ErrBadIdentity = errors.New("cluster: invalid identity")

const (
	identityIDFile          = "node-id"
	identityIncarnationFile = "incarnation"
	maxNodeIDLen            = 128
)

// LoadIdentity reads (or creates) the identity stored in dataDir. The node id
// is taken from dataDir/node-id; if that file does not exist it is created
// from defaultID, or from a random id if defaultID is empty. The incarnation
// counter in dataDir/incarnation is incremented and fsync'd (file and
// directory) before LoadIdentity returns, so every call — every process
// start — returns a larger incarnation than any earlier call on that
// directory. Callers must ensure one process per data dir (the Raft bolt
// store's file lock does). Corrupt files are reported, never repaired.
func LoadIdentity(dataDir, defaultID string) (Identity, error) {
	if dataDir == "" {
		return Identity{}, fmt.Errorf("%w: empty data dir", ErrBadIdentity)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return Identity{}, fmt.Errorf("cluster: create data dir: %w", err)
	}
	if err := checkIdentityPair(dataDir); err != nil {
		return Identity{}, err
	}
	id, err := loadNodeID(dataDir, defaultID)
	if err != nil {
		return Identity{}, err
	}
	inc, err := bumpIncarnation(dataDir)
	if err != nil {
		return Identity{}, err
	}
	return Identity{ID: id, Incarnation: inc}, nil
}

// ValidateNodeID reports whether id can be used as a node id: 1..128
// printable, non-space characters.
func ValidateNodeID(id string) error {
	if id == "" || len(id) > maxNodeIDLen {
		return fmt.Errorf("%w: node id %q must be 1..%d bytes", ErrBadIdentity, id, maxNodeIDLen)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: node id %q contains space or control characters", ErrBadIdentity, id)
		}
	}
	return nil
}

// identityAdvice ends the errors about a damaged identity.
const identityAdvice = "restore the data dir from a backup, or remove the data dir and rejoin as a new member under a new node id (docs/operations.md, \"Damaged storage\")"

// checkIdentityPair refuses a data dir holding one identity file without
// the other. Both are written on a node's first start, so one alone means
// damage: without the node id the dir would take another id over its old
// Raft log; without the counter the incarnation would restart at 1 and
// fencing would no longer tell this process from the ones before it.
func checkIdentityPair(dir string) error {
	exists := func(name string) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	id, err := exists(identityIDFile)
	if err != nil {
		return fmt.Errorf("cluster: stat node id: %w", err)
	}
	inc, err := exists(identityIncarnationFile)
	if err != nil {
		return fmt.Errorf("cluster: stat incarnation: %w", err)
	}
	switch {
	case id && !inc:
		return fmt.Errorf("%w: %s exists but %s is missing: the incarnation counter was lost, and restarting it at 1 would let this process pass for an earlier one; %s",
			ErrBadIdentity, filepath.Join(dir, identityIDFile), filepath.Join(dir, identityIncarnationFile), identityAdvice)
	case inc && !id:
		return fmt.Errorf("%w: %s exists but %s is missing: the node id was lost; %s",
			ErrBadIdentity, filepath.Join(dir, identityIncarnationFile), filepath.Join(dir, identityIDFile), identityAdvice)
	}
	return nil
}

// HasIdentity reports whether dataDir holds an identity (either identity
// file): the dir belonged to a node that started at least once.
func HasIdentity(dataDir string) (bool, error) {
	for _, name := range []string{identityIDFile, identityIncarnationFile} {
		_, err := os.Stat(filepath.Join(dataDir, name))
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("cluster: stat %s: %w", name, err)
		}
	}
	return false, nil
}

func loadNodeID(dir, defaultID string) (string, error) {
	path := filepath.Join(dir, identityIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if err := ValidateNodeID(id); err != nil {
			return "", fmt.Errorf("%s is damaged: %w; %s", path, err, identityAdvice)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("cluster: read node id: %w", err)
	}
	id := defaultID
	if id == "" {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("cluster: generate node id: %w", err)
		}
		id = "node-" + hex.EncodeToString(r[:])
	}
	if err := ValidateNodeID(id); err != nil {
		return "", err
	}
	if err := atomicfile.Write(dir, identityIDFile, []byte(id+"\n")); err != nil {
		return "", err
	}
	return id, nil
}

func bumpIncarnation(dir string) (uint64, error) {
	path := filepath.Join(dir, identityIncarnationFile)
	var cur uint64
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		cur, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s is damaged: %v; %s", ErrBadIdentity, path, err, identityAdvice)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("cluster: read incarnation: %w", err)
	}
	if cur == ^uint64(0) {
		return 0, fmt.Errorf("%w: %s: incarnation counter exhausted", ErrBadIdentity, path)
	}
	next := cur + 1
	if err := atomicfile.Write(dir, identityIncarnationFile, []byte(strconv.FormatUint(next, 10)+"\n")); err != nil {
		return 0, err
	}
	return next, nil
}
