package node

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// TestHandoffOnWord: three real TLS nodes of this binary finalize cluster
// version 6 on their own (nothing to opt in to), and a drain hands shards
// over on the old owner's word: its Transfers reach the leader (forwarded
// over the RPC port, or the leader's own), the targets' asks
// (Control.Words) carry them, and the targets start acting before the
// Transfers apply (wordStarts). Every shard then has a committed owner
// other than the drained node.
func TestHandoffOnWord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	ca, cert, key := tlsFiles(t, t.TempDir(), "n1", "n2", "n3") // words need TLS
	tc := newCluster(t, 3, func(_ int, c *Config) {
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = ca, cert[c.NodeID], key[c.NodeID]
	})
	ctx := tc.ctx()
	for _, n := range tc.nodes {
		be := n.be.(*netBackend)
		if !waitTrue(ctx, func() bool { return be.fsm.State().VersionActive(ledger.VersionHandoffWords) }) {
			t.Fatalf("%s never ran version 6", n.ID())
		}
	}
	// A word that arrives after its Transfer applied is not needed (the
	// target acts on the commit); on a loaded machine a whole drain can go
	// that way, so up to three drains are tried. Words that never work
	// fail all three.
	var starts int64
	var victim *Node
	for _, v := range []*Node{tc.nodes[2], tc.nodes[1], tc.nodes[0]} {
		if victim != nil {
			if err := victim.Undrain(ctx); err != nil {
				t.Fatal(err)
			}
		}
		victim = v
		starts = drainAndCount(t, tc, victim)
		if starts > 0 {
			break
		}
		t.Logf("draining %s: every shard started on the commit", victim.ID())
	}
	if starts == 0 {
		t.Fatal("no shard was handed over on a word in three drains")
	}
	waitOwnedAway(t, tc, victim)
	t.Logf("%d starts on a word", starts)
}

// TestHandoffMixedVersion5: a cluster of the previous release (nodes that
// speak up to 5) of which two nodes are upgraded to this binary stays at
// version 5 until finalized, and a drain of an upgraded node hands over
// the old way: on the committed Transfer, no word asked or acted on.
func TestHandoffMixedVersion5(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	const v5 = ledger.VersionHandoffWords - 1
	ca, cert, key := tlsFiles(t, t.TempDir(), "n1", "n2", "n3") // as TestHandoffOnWord: only the version differs
	// ManualFinalize, as an operator upgrades (--manual-finalize): the
	// leader finalizes on its own once every node holding a lease speaks
	// 6, and on a loaded machine n3's lease may lapse for a moment.
	tc := newCluster(t, 3, func(_ int, c *Config) {
		c.speakMax, c.ManualFinalize = v5, true
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = ca, cert[c.NodeID], key[c.NodeID]
	})
	ctx := tc.ctx()
	st := func(n *Node) *ledger.State { return n.be.(*netBackend).fsm.State() }
	// Upgrade n1 and n2; n3 stays on the previous release.
	for i := range 2 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := tc.nodes[i].Close(cctx)
		cancel()
		if err != nil {
			t.Fatalf("close n%d: %v", i+1, err)
		}
		tc.cfgs[i].speakMax = 0
		if tc.nodes[i], err = tc.start(i); err != nil {
			t.Fatalf("upgrade n%d: %v", i+1, err)
		}
	}
	for _, n := range tc.nodes {
		if !waitTrue(ctx, func() bool {
			for _, m := range tc.nodes[:2] {
				if r, ok := st(n).Node(m.ID()); !ok || r.MaxVersion != ledger.MaxClusterVersion {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s never saw n1 and n2 speak %d", n.ID(), ledger.MaxClusterVersion)
		}
	}
	victim := tc.nodes[0] // this binary: it would send words at version 6
	if starts := drainAndCount(t, tc, victim); starts != 0 {
		t.Fatalf("%d starts on a word in a cluster at version %d", starts, v5)
	}
	waitOwnedAway(t, tc, victim)
	for _, n := range tc.nodes {
		if v := st(n).ActiveVersion(); v != v5 {
			t.Fatalf("%s: the mixed cluster runs version %d, want %d", n.ID(), v, v5)
		}
	}
}

// drainAndCount drains victim and returns the starts on a word summed
// over the cluster's nodes.
func drainAndCount(t *testing.T, tc *testCluster, victim *Node) (starts int64) {
	t.Helper()
	ctx := tc.ctx()
	if !waitTrue(ctx, func() bool { return len(victim.Owned()) > 0 }) {
		t.Fatalf("test premise: %s owns no shard to drain", victim.ID())
	}
	if err := victim.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.nodes {
		starts += n.be.(*netBackend).wordStarts.Load()
	}
	return starts
}

// waitOwnedAway waits until every shard has a committed owner other than
// victim.
func waitOwnedAway(t *testing.T, tc *testCluster, victim *Node) {
	t.Helper()
	if !waitTrue(tc.ctx(), func() bool {
		st := tc.nodes[0].be.(*netBackend).fsm.State()
		for s := range uint32(16) {
			rec, _ := st.Shard(s)
			if rec.State != ledger.ShardOwned || rec.Owner == victim.ID() {
				return false
			}
		}
		return true
	}) {
		t.Fatal("shards not all owned away from the drained node")
	}
}

// TestRelayableNeedsProof: the leader relays a forwarded Transfer as its
// From's word only when an authenticated connection proved the sender is
// that From; without TLS (nothing proven) it never does.
func TestRelayableNeedsProof(t *testing.T) {
	tf := ledger.Transfer{Shard: 1, Epoch: 3, From: "n1", To: "n2"}
	for _, c := range []struct {
		name string
		p    cluster.Peer
		auth bool
		want bool
	}{
		{"from, authenticated", cluster.Peer{ID: "n1", Role: cluster.RoleNode}, true, true},
		{"another node", cluster.Peer{ID: "n3", Role: cluster.RoleNode}, true, false},
		{"operator", cluster.Peer{ID: "n1", Role: cluster.RoleOperator}, true, false},
		{"insecure", cluster.Peer{ID: "n1", Role: cluster.RoleNode}, false, false},
		{"insecure, no peer", cluster.Peer{}, false, false},
	} {
		if got := relayable(c.p, c.auth, tf); got != c.want {
			t.Errorf("%s: relayable = %v, want %v", c.name, got, c.want)
		}
	}
}
