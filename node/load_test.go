package node

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ring"
)

func TestLoadTagRoundTrip(t *testing.T) {
	loads := []ring.ShardLoad{{Shard: 7, Load: 120.5}, {Shard: 3, Load: 40}, {Shard: 9, Load: 1e-3}, {Shard: 1, Load: 0.5}}
	tag := formatLoad(loads)
	if len(tag) > loadTagMax {
		t.Fatalf("tag %q over %d bytes", tag, loadTagMax)
	}
	lr := parseLoad(tag)
	if lr == nil || math.Abs(lr.Total-161) > 1 || len(lr.Hot) != loadHotShards || lr.Hot[0] != (ring.ShardLoad{Shard: 7, Load: 120}) {
		t.Fatalf("parse(%q) = %+v", tag, lr)
	}
	for _, bad := range []string{"", "x;", "1", "-1;", "NaN;", "1;2", "1;2:x", "1;2:-1", "1;99999999999:1", "1;1:1,1:1,1:1,1:1,1:1,1:1,1:1", "1;1:Inf"} {
		if lr := parseLoad(bad); lr != nil {
			t.Errorf("parseLoad(%q) = %+v, want nil", bad, lr)
		}
	}
	if lr := parseLoad("0;"); lr == nil || lr.Total != 0 || len(lr.Hot) != 0 {
		t.Errorf("parseLoad(\"0;\") = %+v", lr)
	}
}

func FuzzParseLoad(f *testing.F) {
	f.Add("12.5;3:10,4:2")
	f.Add("0;")
	f.Fuzz(func(t *testing.T, s string) {
		if lr := parseLoad(s); lr != nil && (lr.Total < 0 || len(lr.Hot) > 2*loadHotShards) {
			t.Fatalf("parseLoad(%q) = %+v", s, lr)
		}
	})
}

// TestLoadAwarePlacement runs a real 3-node cluster whose nodes report
// loads: every shard 1, two shards of one node 30 each. The leader swaps
// one of them onto another node (two planned handoffs, counts unchanged)
// and then stops: the placement is left alone however long it runs.
func TestLoadAwarePlacement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	tc := newCluster(t, 3, func(_ int, c *Config) { c.LoadSettle = 500 * time.Millisecond })
	ctx := tc.ctx()
	for _, n := range tc.nodes {
		if err := n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := func() *ledger.State { return tc.nodes[0].be.(*netBackend).fsm.State() }
	owners := func() map[uint32]string {
		out := map[uint32]string{}
		for _, r := range st().Shards() {
			if r.State == ledger.ShardOwned && int(r.Shard) < tc.nodes[0].Partitions() {
				out[r.Shard] = r.Owner
			}
		}
		return out
	}
	if !waitTrue(ctx, func() bool { return len(owners()) == tc.nodes[0].Partitions() }) {
		t.Fatal("never settled")
	}
	own := owners()
	hotNode := tc.nodes[0].ID()
	var hot []uint32
	for s := range uint32(tc.nodes[0].Partitions()) {
		if own[s] == hotNode && len(hot) < 2 {
			hot = append(hot, s)
		}
	}
	load := func(s uint32) float64 {
		for _, h := range hot {
			if h == s {
				return 30
			}
		}
		return 1
	}
	report := func() {
		for _, n := range tc.nodes {
			for _, tok := range n.Owned() {
				if err := n.ReportLoad(tok.Shard, load(tok.Shard)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	moved := func() bool {
		o := owners()
		return (o[hot[0]] != hotNode || o[hot[1]] != hotNode) && len(o) == tc.nodes[0].Partitions()
	}
	if !waitTrue(ctx, func() bool { report(); return moved() }) {
		t.Fatalf("no hot shard moved off %s", hotNode)
	}
	o := owners()
	counts := map[string]int{}
	for _, id := range o {
		counts[id]++
	}
	p := tc.nodes[0].Partitions()
	for _, n := range tc.nodes {
		if c := counts[n.ID()]; c < p/3 || c > (p+2)/3 {
			t.Fatalf("counts %v after the swap: not balanced", counts)
		}
	}
	if o[hot[0]] == o[hot[1]] {
		t.Fatalf("both hot shards on %s after the swap", o[hot[0]])
	}
	// Nothing more moves: the two hot shards are on two nodes.
	epochs := map[uint32]uint64{}
	for _, r := range st().Shards() {
		epochs[r.Shard] = r.Epoch
	}
	if waitTrue(shortCtx(t, 4*tc.nodes[0].Timing().Lease), func() bool {
		report()
		for _, r := range st().Shards() {
			if r.Epoch != epochs[r.Shard] {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the placement kept moving after the swap")
	}
	for _, m := range tc.nodes[1].Members() {
		if m.Load == nil {
			t.Fatalf("member %s shows no gossiped load", m.ID)
		}
	}
}

// shortCtx is a context that ends after d (or with the test).
func shortCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
