package node

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// TestFencedTakeover runs a real 3-node cluster (fast profile). Before
// cluster version 4 the policy is refused with ErrVersionInactive. With it,
// a fenced election whose leader stops heartbeating (it is still running
// and still believes it leads) passes to another node without waiting out
// the leader's lease — the grant is a fenced takeover, the old leader is
// not expired — and the old leader's token is refused by a fenced write.
func TestFencedTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	t.Run("gated", func(t *testing.T) {
		tc := newCluster(t, 3, func(_ int, c *Config) { c.speakMax = ledger.VersionFencedTakeover - 1 })
		ctx := tc.ctx()
		if !waitTrue(ctx, func() bool { return tc.nodes[0].be.(*netBackend).fsm.State().Cluster().Name != "" }) {
			t.Fatal("no cluster config")
		}
		if err := tc.nodes[0].Election("x").SetFencedTakeover(ctx, true); !errors.Is(err, ErrVersionInactive) {
			t.Fatalf("fenced takeover at version 3: %v, want ErrVersionInactive", err)
		}
		if err := tc.nodes[0].SetFencedTakeover(ctx, 3, 2, true); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty range: %v, want ErrInvalid", err)
		}
	})
	t.Run("failover", func(t *testing.T) {
		sms := []*sumSM{newSumSM(), newSumSM(), newSumSM()}
		tc := newCluster(t, 3, func(i int, c *Config) { c.StateMachines = map[string]StateMachine{"sum": sms[i]} })
		ctx := tc.ctx()
		st := func() *ledger.State { return tc.nodes[0].be.(*netBackend).fsm.State() }
		if !waitTrue(ctx, func() bool { return st().VersionActive(ledger.VersionFencedTakeover) }) {
			t.Fatal("the cluster never ran version 4")
		}
		e := tc.nodes[1].Election("fenced")
		if err := e.SetFencedTakeover(ctx, true); err != nil {
			t.Fatal(err)
		}
		if err := tc.nodes[1].SetFencedTakeover(ctx, 0, uint32(tc.nodes[0].Partitions()), true); !errors.Is(err, ErrInvalid) {
			t.Fatalf("range past the last shard: %v, want ErrInvalid", err)
		}
		for _, n := range tc.nodes {
			if !waitTrue(ctx, func() bool {
				rs, err := n.FencedShards()
				return err == nil && slices.Equal(rs, []ShardRange{{First: e.Shard(), Last: e.Shard()}})
			}) {
				t.Fatalf("%s never saw the policy", n.ID())
			}
		}
		leaderID, err := e.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		old := tc.byID(leaderID)
		oe := old.Election("fenced")
		tok, err := oe.Token()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		old.be.(*netBackend).dropHeartbeats.Store(true)
		var next *Node
		if !waitTrue(ctx, func() bool {
			for _, n := range tc.others(leaderID) {
				if n.Election("fenced").IsLeader() {
					next = n
					return true
				}
			}
			return false
		}) {
			t.Fatal("no new leader")
		}
		took := time.Since(start)
		r, _ := st().Shard(e.Shard())
		t.Logf("fenced failover: %s -> %s in %v (granted after %v)", leaderID, next.ID(), took, time.Unix(0, r.ChangedAt).Sub(start))
		if want := "fenced takeover from " + leaderID; !strings.HasPrefix(r.Reason, want) {
			t.Fatalf("shard %d granted with reason %q, want %q", e.Shard(), r.Reason, want)
		}
		// A fenced takeover (the reason above), not an expiry: the grant
		// bumped the epoch once, while the old leader's lease may still
		// run (S4 waived).
		if r.Epoch != tok.Epoch+1 {
			t.Fatalf("epoch %d after the takeover, want %d", r.Epoch, tok.Epoch+1)
		}
		if _, err := old.Propose(ctx, tok, "sum", u64(1000)); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("stale leader's propose = %v, want ErrStaleToken", err)
		}
		tok2, err := next.Election("fenced").Token()
		if err != nil {
			t.Fatal(err)
		}
		if !tok2.Newer(tok) {
			t.Fatalf("new token %s not newer than %s", tok2, tok)
		}
		old.be.(*netBackend).dropHeartbeats.Store(false)
	})
}
