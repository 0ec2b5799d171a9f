package node

import (
	"errors"
	"testing"

	"github.com/tenurehq/tenure/ledger"
)

// TestPlacementRules runs a real 3-node cluster: before cluster version 3
// is active, pins and exclusions are refused with ErrVersionInactive and
// nothing is proposed; at version 3 a pin moves its shard to the pinned
// node, an exclusion empties a node, and lifting it lets it own again.
// Weighted nodes get proportional shares.
func TestPlacementRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	t.Run("gated", func(t *testing.T) {
		tc := newCluster(t, 3, func(_ int, c *Config) { c.speakMax = ledger.VersionPlacementRules - 1 })
		ctx := tc.ctx()
		if !waitTrue(ctx, func() bool { return tc.nodes[0].be.(*netBackend).fsm.State().Cluster().Name != "" }) {
			t.Fatal("no cluster config")
		}
		err := tc.nodes[0].PinShard(ctx, 0, tc.nodes[1].ID(), "")
		if !errors.Is(err, ErrVersionInactive) {
			t.Fatalf("pin at version 2: %v, want ErrVersionInactive", err)
		}
		if err := tc.nodes[0].ExcludeNode(ctx, tc.nodes[1].ID(), ""); !errors.Is(err, ErrVersionInactive) {
			t.Fatalf("exclude at version 2: %v, want ErrVersionInactive", err)
		}
		for _, n := range tc.nodes {
			_, cmds := logEntries(t, n)
			for _, c := range cmds {
				if k := ledger.KindOf(c); k == ledger.KindPinShard || k == ledger.KindExcludeNode {
					t.Fatalf("%s: the log holds a %s at cluster version 2", n.ID(), k)
				}
			}
		}
	})
	t.Run("active", func(t *testing.T) {
		tc := newCluster(t, 3, func(i int, c *Config) {
			if i == 2 {
				c.Weight = 2
			}
		})
		ctx := tc.ctx()
		st := func() *ledger.State { return tc.nodes[0].be.(*netBackend).fsm.State() }
		if !waitTrue(ctx, func() bool { return st().VersionActive(ledger.VersionPlacementRules) }) {
			t.Fatal("the cluster never ran version 3")
		}
		owned := func(id string) int {
			k := 0
			for _, r := range st().Shards() {
				if r.Owner == id && r.State == ledger.ShardOwned && int(r.Shard) < tc.nodes[0].Partitions() {
					k++
				}
			}
			return k
		}
		a, b, c := tc.nodes[0].ID(), tc.nodes[1].ID(), tc.nodes[2].ID()
		p := tc.nodes[0].Partitions()
		// Weight 2 of 4: half the partitions, once the placement settles.
		if !waitTrue(ctx, func() bool { return owned(c) == p/2 && owned(a)+owned(b) == p-p/2 }) {
			t.Fatalf("weighted shares: %s %d, %s %d, %s %d (weight 2) of %d", a, owned(a), b, owned(b), c, owned(c), p)
		}
		// Pin a shard of b to a (through a node that is not a).
		var shard uint32
		for _, r := range st().Shards() {
			if r.Owner == b {
				shard = r.Shard
				break
			}
		}
		if err := tc.nodes[1].PinShard(ctx, shard, a, "test"); err != nil {
			t.Fatal(err)
		}
		if !waitTrue(ctx, func() bool {
			r, _ := st().Shard(shard)
			return r.Owner == a && r.State == ledger.ShardOwned
		}) {
			t.Fatalf("pinned shard %d never moved to %s", shard, a)
		}
		rules, err := tc.nodes[2].PlacementRules()
		if err != nil || !waitTrue(ctx, func() bool { rules, _ = tc.nodes[2].PlacementRules(); return len(rules.Pins) == 1 }) {
			t.Fatalf("rules %+v, %v", rules, err)
		}
		if err := tc.nodes[0].PinShard(ctx, uint32(p), a, ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("pin of shard %d: %v, want ErrInvalid", p, err)
		}
		if err := tc.nodes[0].PinShard(ctx, 0, "nobody", ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("pin to an unknown node: %v, want ErrInvalid", err)
		}
		// Exclude b: it empties; the pin holds.
		if err := tc.nodes[0].ExcludeNode(ctx, b, "test"); err != nil {
			t.Fatal(err)
		}
		if !waitTrue(ctx, func() bool { return owned(b) == 0 && owned(a)+owned(c) == p }) {
			t.Fatalf("excluded %s still owns %d", b, owned(b))
		}
		if r, _ := st().Shard(shard); r.Owner != a {
			t.Fatalf("pinned shard %d moved to %s", shard, r.Owner)
		}
		for _, m := range tc.nodes[0].Members() {
			if m.ID == b && !m.Excluded {
				t.Fatalf("member %s not shown excluded", b)
			}
		}
		if err := tc.nodes[0].IncludeNode(ctx, b); err != nil {
			t.Fatal(err)
		}
		if !waitTrue(ctx, func() bool { return owned(b) > 0 }) {
			t.Fatalf("%s never owned again after the exclusion was lifted", b)
		}
	})
}
