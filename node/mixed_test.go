package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// TestMixedClusterVersions runs a really mixed cluster: nodes of an older
// release (speakMax below the gate of the newest feature) next to nodes of
// this one, the cluster version held where the oldest node can run
// (ManualFinalize, `--manual-finalize`). It checks, in the order an
// operator meets them: after a rolling upgrade of two of three nodes the
// cluster stays at the old version and refuses the gated command from an
// upgraded node and from the old one; the downgrade window is open (an
// upgraded node goes back to the old binary and runs); once every node
// runs the new binary, finalizing raises the version and the command is
// accepted; and then the old binary, started on a data dir that ran at the
// new version, is refused with ErrVersionMismatch naming both versions.
//
// The gate is fenced takeover (cluster version 4, the newest gated
// command of the previous release): the older binary speaks up to 3.
// This round's own gated commands (cluster version 5) belong in gated
// below, with an old binary speaking 4.
func TestMixedClusterVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	old := ledger.VersionFencedTakeover - 1
	gated := func(ctx context.Context, n *Node) error { return n.SetFencedTakeover(ctx, 0, 0, true) }
	tc := newCluster(t, 3, func(_ int, c *Config) { c.speakMax, c.ManualFinalize = old, true })
	// Six restarts: one context for the whole test, not the cluster's
	// per-phase clusterTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := func(n *Node) *ledger.State { return n.be.(*netBackend).fsm.State() }
	if !waitTrue(ctx, func() bool { return st(tc.nodes[0]).Cluster().Name != "" }) {
		t.Fatal("no cluster config")
	}
	// restart stops node i and starts it again on its data dir as a binary
	// that speaks up to speak (0: this binary's newest), and waits until
	// every replica knows its new range.
	restart := func(i int, speak uint32) error {
		t.Helper()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tc.nodes[i].Close(cctx); err != nil {
			t.Fatalf("close n%d: %v", i+1, err)
		}
		tc.cfgs[i].speakMax = speak
		n, err := tc.start(i)
		if err != nil {
			return err
		}
		tc.nodes[i] = n
		want := speak
		if want == 0 {
			want = ledger.MaxClusterVersion
		}
		for _, m := range tc.nodes {
			if !waitTrue(ctx, func() bool { r, ok := st(m).Node(n.ID()); return ok && r.MaxVersion == want }) {
				t.Fatalf("%s never saw %s speak %d", m.ID(), n.ID(), want)
			}
		}
		return nil
	}
	// A rolling upgrade of n1 and n2: mixed with n3 on the old binary.
	for _, i := range []int{0, 1} {
		if err := restart(i, 0); err != nil {
			t.Fatalf("upgrade n%d: %v", i+1, err)
		}
	}
	speaks := map[string]uint32{}
	for _, r := range st(tc.nodes[0]).Nodes() {
		speaks[r.ID] = r.MaxVersion
	}
	t.Logf("mixed: nodes speak %v, the cluster runs %d", speaks, st(tc.nodes[0]).ActiveVersion())
	if v := st(tc.nodes[0]).ActiveVersion(); v != old {
		t.Fatalf("mixed cluster runs version %d, want %d (the old node's newest; finalizing is manual)", v, old)
	}
	for _, n := range tc.nodes {
		if err := gated(ctx, n); !errors.Is(err, ErrVersionInactive) {
			t.Fatalf("gated command on %s (speaks %d) in a cluster at %d: %v, want ErrVersionInactive", n.ID(), speaks[n.ID()], old, err)
		}
	}
	// The downgrade window: an upgraded node goes back and runs.
	if err := restart(0, old); err != nil {
		t.Fatalf("downgrade n1 before finalizing: %v", err)
	}
	for _, i := range []int{0, 2} {
		if err := restart(i, 0); err != nil {
			t.Fatalf("upgrade n%d: %v", i+1, err)
		}
	}
	if v := st(tc.nodes[0]).ActiveVersion(); v != old {
		t.Fatalf("every node upgraded, finalizing manual: the cluster runs %d, want still %d", v, old)
	}
	us, err := tc.nodes[1].FinalizeUpgrade(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if us.Active != ledger.MaxClusterVersion {
		t.Fatalf("finalized to %d, want %d", us.Active, ledger.MaxClusterVersion)
	}
	if !waitTrue(ctx, func() bool { return st(tc.nodes[2]).VersionActive(ledger.MaxClusterVersion) }) {
		t.Fatal("n3 never saw the finalized version")
	}
	if err := gated(ctx, tc.nodes[2]); err != nil {
		t.Fatalf("gated command after finalizing: %v", err)
	}
	// Past the window: the old binary on n3's data dir is refused.
	err = restart(2, old)
	if !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("old binary on a data dir finalized at %d: %v, want ErrVersionMismatch", ledger.MaxClusterVersion, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "last run at cluster version") {
		t.Fatalf("refusal does not say why: %v", err)
	}
	t.Logf("old binary refused: %v", err)
	tc.nodes[2] = nil
}
