package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// TestReplicaHaltsOnUnreadableEntry puts a real log entry of an unknown
// encoding version into a three-node cluster's log (the leader's check is
// turned off for the test). Every replica stops at it instead of skipping
// it: the nodes report it in their health, stop acting once their leases
// run out, and a node restarted with the same binary halts at the same
// index again (the entry was kept, not skipped).
func TestReplicaHaltsOnUnreadableEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	if old := tuneControl; true {
		tuneControl = func(c *controlTuning) { old(c); c.uncheckedCommands = true }
		t.Cleanup(func() { tuneControl = old })
	}
	tc := newCluster(t, 3, nil)
	ctx := tc.ctx()
	entry := []byte{ledger.Version + 1, 1, 0} // a version no build reads yet
	var idx uint64
	for _, n := range tc.nodes {
		r, err := n.be.(*netBackend).ctl.Apply(ctx, entry)
		if err == nil {
			idx = r.Index
			break
		}
	}
	if idx == 0 {
		t.Fatal("could not commit the unreadable entry")
	}
	for _, n := range tc.nodes {
		if !waitTrue(ctx, func() bool {
			h := n.Health()
			return h.ReplicaHaltedAt == idx && h.Status == Unhealthy &&
				strings.Contains(strings.Join(h.Reasons, ";"), "replica stopped applying")
		}) {
			t.Fatalf("%s: health %+v, want halted at %d", n.ID(), n.Health(), idx)
		}
		if !waitTrue(ctx, func() bool { return len(n.Owned()) == 0 }) {
			t.Fatalf("%s still acts on %v with a halted replica", n.ID(), n.Owned())
		}
	}
	// A halted node cannot hand its shards over (it acts on none): Close
	// gives up on the drain and the leave broadcast within its context.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_ = tc.nodes[2].Close(cctx)
	cancel()
	tc.nodes[2] = nil
	// Restarted with the same binary, it replays the log and stops at the
	// same entry: Start says so instead of joining.
	n3, err := tc.start(2)
	if err == nil {
		tc.nodes[2] = n3
		t.Fatal("a node whose binary cannot read the log started")
	}
	if !errors.Is(err, ErrVersionMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("log index %d", idx)) {
		t.Fatalf("restart: %v, want ErrVersionMismatch naming index %d", err, idx)
	}
}
