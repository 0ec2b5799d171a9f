package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// TestClusterConfigRecorded: a new cluster records its name, partition count
// and cluster version in the ledger; every node reports the same upgrade
// status, persists the version in its data dir, and there is nothing to
// finalize when every node runs this binary.
func TestClusterConfigRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	tc := newCluster(t, 3, nil)
	ctx := tc.ctx()
	n1 := tc.nodes[0]
	var us UpgradeStatus
	if !waitTrue(ctx, func() bool {
		var err error
		us, err = n1.UpgradeStatus()
		return err == nil && us.Active == ledger.MaxClusterVersion && len(us.Nodes) == 3
	}) {
		t.Fatalf("upgrade status never showed 3 nodes at version %d: %+v", ledger.MaxClusterVersion, us)
	}
	st := n1.be.(*netBackend).fsm.State().Cluster()
	if st.Name != n1.cfg.Cluster || int(st.Partitions) != n1.cfg.Partitions {
		t.Fatalf("recorded cluster %+v, want %q with %d partitions", st, n1.cfg.Cluster, n1.cfg.Partitions)
	}
	if us.Target != ledger.MaxClusterVersion || len(us.Blockers) != 0 {
		t.Fatalf("status %+v: want target %d and no blockers", us, ledger.MaxClusterVersion)
	}
	if _, err := n1.FinalizeUpgrade(ctx); !errors.Is(err, ErrNothingToFinalize) {
		t.Fatalf("FinalizeUpgrade = %v, want ErrNothingToFinalize", err)
	}
	for i := range tc.nodes {
		if !waitTrue(ctx, func() bool {
			b, err := os.ReadFile(filepath.Join(tc.cfgs[i].DataDir, versionFileName))
			return err == nil && strings.TrimSpace(string(b)) == fmt.Sprint(ledger.MaxClusterVersion)
		}) {
			t.Fatalf("n%d never recorded the cluster version in its data dir", i+1)
		}
	}
	// At version 4 the leader commits the settings its replica applies
	// with (ledger.LogSettings): every replica then judges with the
	// logged ones.
	want := ledger.LogSettingsOf(ledger.DefaultConfig().Settings(), 0)
	for i, n := range tc.nodes {
		var s ledger.LedgerSettings
		if !waitTrue(ctx, func() bool {
			s = n.be.(*netBackend).fsm.State().Settings()
			return s.Logged
		}) || ledger.LogSettingsOf(s, 0) != want {
			t.Fatalf("n%d settings %+v, want logged %+v", i+1, s, want)
		}
	}
}

// TestDataDirFromNewerVersionRefused: a data dir last run at a cluster
// version this binary does not speak is refused before the node joins;
// a damaged version file is refused too.
func TestDataDirFromNewerVersionRefused(t *testing.T) {
	for name, content := range map[string]string{
		"newer":   "99\n",
		"damaged": "x",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := ConfigFromEnv(func(string) string { return "" })
			cfg.NodeID, cfg.DataDir, cfg.Profile, cfg.BootstrapExpect = "n1", t.TempDir(), ProfileFast, 1
			cfg.GossipAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
			if err := os.WriteFile(filepath.Join(cfg.DataDir, versionFileName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			n, err := Start(ctx, cfg)
			if err == nil {
				_ = n.Close(ctx)
				t.Fatal("started on a data dir from a newer cluster version")
			}
			want := ErrVersionMismatch
			if name == "damaged" {
				want = ledger.ErrStoreCorrupt
			}
			if !errors.Is(err, want) || time.Since(start) > 10*time.Second {
				t.Fatalf("Start = %v after %v, want %v at once", err, time.Since(start), want)
			}
		})
	}
}
