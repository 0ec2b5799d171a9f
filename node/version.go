package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// versionFileName keeps, in DataDir, the newest cluster version this node
// has seen active: a binary that cannot run at it refuses to start on this
// data dir (docs/upgrades.md).
const versionFileName = "cluster-version"

// checkCluster compares the committed cluster configuration with this
// node's, once its replica has caught up to its own heartbeat, and records
// the active version in DataDir before the node acts at it.
func (b *netBackend) checkCluster() error {
	ci := b.fsm.State().Cluster()
	if ci.Name != "" && (ci.Name != b.cfg.Cluster || int(ci.Partitions) != b.cfg.Partitions) {
		return fmt.Errorf("%w: the ledger records cluster %q with %d partitions; this node is configured for %q with %d",
			ErrClusterMismatch, ci.Name, ci.Partitions, b.cfg.Cluster, b.cfg.Partitions)
	}
	return b.persistVersion(max(ci.Version, 1))
}

// persistVersion writes v to DataDir's version file if it is newer than
// what the file holds.
func (b *netBackend) persistVersion(v uint32) error {
	dir := b.versionDir()
	if dir == "" {
		return nil
	}
	b.versionMu.Lock()
	defer b.versionMu.Unlock()
	if v <= b.versionSeen {
		return nil
	}
	if err := cluster.WriteFileAtomic(dir, versionFileName, []byte(strconv.FormatUint(uint64(v), 10)+"\n")); err != nil {
		return fmt.Errorf("node: record cluster version %d: %w", v, err)
	}
	b.versionSeen = v
	return nil
}

func (b *netBackend) versionDir() string {
	if b.cfg.DataDir == "" || b.cfg.Network != nil {
		return ""
	}
	return b.cfg.DataDir
}

// checkVersionFile refuses a data dir last run at a cluster version this
// binary cannot run at: above hi, the newest it speaks (0:
// ledger.MaxClusterVersion; Config.speakMax in tests, standing in for an
// older binary). It returns the version recorded (0 if none).
func checkVersionFile(dataDir string, hi uint32) (uint32, error) {
	if hi == 0 {
		hi = ledger.MaxClusterVersion
	}
	path := filepath.Join(dataDir, versionFileName)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("node: read %s: %w", path, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 32)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%w: %s is damaged (%q): it records the cluster version this data dir last ran at; "+
			"restore it, or write the cluster's version (`tenure upgrade status`) into it", ledger.ErrStoreCorrupt, path, raw)
	}
	if uint32(v) > hi {
		return 0, fmt.Errorf("%w: %s was last run at cluster version %d; this binary speaks %d to %d: "+
			"the cluster was finalized past it, so it can only run a binary that speaks %d",
			ErrVersionMismatch, dataDir, v, ledger.MinClusterVersion, hi, v)
	}
	return uint32(v), nil
}
