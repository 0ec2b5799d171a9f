package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// TestHandoffOnWord: three real TLS nodes of this binary finalize cluster
// version 6 on their own (nothing to opt in to), and a drain hands shards
// over on the old owner's word: its word reaches the leader
// (Control.OwnerWord over the RPC port, or the leader's own), the targets' asks
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

// TestRelayableNeedsProof: the leader relays a told Transfer as its
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

// TestRevokeInFlight: three real TLS nodes at cluster version 6; a node
// is drained and, as soon as its replica shows one of its shards revoked
// toward a target (the Revoke just applied; the old owner's word and
// Transfer may be on their way), its application resigns that shard, or
// the node is killed, or the control-group leader is killed. A sampler
// reads every live node's acting set twice in a row (node i acting at both
// of its reads spans node j's read in between) and finds no shard acting
// on two nodes at once (S1); the shard ends owned by a live node other
// than the old owner at a later epoch, as every live replica shows.
func TestRevokeInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	for _, action := range []string{"resign", "kill-owner", "kill-leader"} {
		t.Run(action, func(t *testing.T) {
			ca, cert, key := tlsFiles(t, t.TempDir(), "n1", "n2", "n3")
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
			// The victim: a node that is not the control-group leader and
			// owns shards.
			var victim, leader *Node
			if !waitTrue(ctx, func() bool {
				lid := tc.nodes[0].be.(*netBackend).ctl.Leader()
				victim, leader = nil, nil
				for _, n := range tc.nodes {
					switch {
					case n.ID() == lid:
						leader = n
					case victim == nil && len(n.Owned()) > 0:
						victim = n
					}
				}
				return leader != nil && victim != nil
			}) {
				t.Fatal("test premise: no leader, or no other node owning shards")
			}
			var mu sync.Mutex
			dead := map[*Node]bool{}
			var overlaps []string
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				acting := func(n *Node) map[uint32]uint64 {
					m := map[uint32]uint64{}
					for _, tok := range n.Owned() {
						m[tok.Shard] = tok.Epoch
					}
					return m
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					var live []*Node
					for _, n := range tc.nodes {
						if !dead[n] {
							live = append(live, n)
						}
					}
					mu.Unlock()
					first, second := make([]map[uint32]uint64, len(live)), make([]map[uint32]uint64, len(live))
					for i, n := range live {
						first[i] = acting(n)
					}
					for i, n := range live {
						second[i] = acting(n)
					}
					ids := make([]string, len(live))
					for i, n := range live {
						ids[i] = n.ID()
					}
					overlaps = append(overlaps, spanOverlaps(ids, first, second)...)
					time.Sleep(200 * time.Microsecond)
				}
			}()
			// The victim's replica tells when a Revoke of one of its shards
			// toward a target applies (the hook runs on its apply goroutine).
			vb := victim.be.(*netBackend)
			revoked := make(chan ledger.Revoke, 1)
			vb.fsm.OnApply(func(_ uint64, c ledger.Command, r ledger.Result) {
				if rv, ok := c.(ledger.Revoke); ok && r.Err == nil && rv.Target != "" {
					select {
					case revoked <- rv:
					default:
					}
				}
			})
			drained := make(chan error, 1)
			go func() { drained <- victim.Drain(ctx) }()
			var rec ledger.ShardRecord
			select {
			case rv := <-revoked:
				rec = ledger.ShardRecord{Shard: rv.Shard, Epoch: rv.Epoch, Owner: victim.ID(), Target: rv.Target}
			case <-ctx.Done():
				t.Fatal("no shard of the drained node was revoked toward a target")
			}
			switch action {
			case "resign":
				vb.resigned(rec.Shard, rec.Epoch)
				if err := vb.resign(ctx, rec.Shard, rec.Epoch); err != nil {
					// The drain's handoff may commit first (its Transfer moves
					// the shard to epoch+1 before the resign's Release
					// reaches the leader): the Release is then stale, and
					// rightly refused. Any other error, or a stale refusal
					// while the shard is still at the Revoke's epoch, fails.
					cur, _ := vb.fsm.State().Shard(rec.Shard)
					if !errors.Is(err, ErrStaleToken) || cur.Epoch <= rec.Epoch {
						t.Errorf("resign of shard %d at epoch %d while its Revoke toward %s applied: %v (the shard now at epoch %d)", rec.Shard, rec.Epoch, rec.Target, err, cur.Epoch)
					} else {
						t.Logf("resign of shard %d at epoch %d came after the handoff committed (now epoch %d, owner %s): %v", rec.Shard, rec.Epoch, cur.Epoch, cur.Owner, err)
					}
				}
			case "kill-owner":
				mu.Lock()
				dead[victim] = true
				mu.Unlock()
				victim.kill()
			case "kill-leader":
				mu.Lock()
				dead[leader] = true
				mu.Unlock()
				leader.kill()
			}
			var live []*Node
			for _, n := range tc.nodes {
				if !dead[n] {
					live = append(live, n)
				}
			}
			moved := func() bool {
				for _, n := range live {
					r, _ := n.be.(*netBackend).fsm.State().Shard(rec.Shard)
					if r.State != ledger.ShardOwned || r.Epoch <= rec.Epoch || r.Owner == victim.ID() || dead[tc.byID(r.Owner)] {
						return false
					}
				}
				return true
			}
			if !waitTrue(ctx, moved) {
				r, _ := live[0].be.(*netBackend).fsm.State().Shard(rec.Shard)
				t.Fatalf("shard %d revoked from %s at epoch %d never moved on to a live node: %+v", rec.Shard, victim.ID(), rec.Epoch, r)
			}
			if action != "kill-owner" {
				<-drained
			}
			close(stop)
			<-sampled
			if len(overlaps) > 0 {
				t.Fatalf("%d overlapping samples (S1), first: %s", len(overlaps), overlaps[0])
			}
			t.Logf("shard %d: revoked from %s toward %s at epoch %d, %s while the Revoke applied; moved on without an overlap",
				rec.Shard, victim.ID(), rec.Target, rec.Epoch, action)
		})
	}
}

// spanOverlaps finds the shards two nodes acted on at once in two passes
// over the nodes' acting sets (shard → epoch), read in order, ids[i]'s
// sets first[i] then second[i]: node i acting at the same epoch at both
// of its reads acted all along between them, when node j was read — j's
// first read if i < j, its second if i > j.
func spanOverlaps(ids []string, first, second []map[uint32]uint64) []string {
	var out []string
	for i := range ids {
		for j := range ids {
			if i == j {
				continue
			}
			mid := first[j]
			if i > j {
				mid = second[j]
			}
			for s, e := range first[i] {
				if e2, ok := second[i][s]; ok && e2 == e {
					if ej, ok := mid[s]; ok {
						out = append(out, fmt.Sprintf("shard %d: %s at epoch %d and %s at epoch %d", s, ids[i], e, ids[j], ej))
					}
				}
			}
		}
	}
	return out
}

// TestSpanOverlaps: the sampler of TestRevokeInFlight finds an overlap
// only when one node's two reads span the other's.
func TestSpanOverlaps(t *testing.T) {
	ids := []string{"a", "b"}
	m := func(kv ...uint64) map[uint32]uint64 {
		out := map[uint32]uint64{}
		for i := 0; i < len(kv); i += 2 {
			out[uint32(kv[i])] = kv[i+1]
		}
		return out
	}
	for _, c := range []struct {
		name          string
		first, second []map[uint32]uint64
		want          int
	}{
		{"a spans b's first read", []map[uint32]uint64{m(1, 3), m(1, 4)}, []map[uint32]uint64{m(1, 3), m()}, 1},
		{"b spans a's second read", []map[uint32]uint64{m(), m(1, 4)}, []map[uint32]uint64{m(1, 3), m(1, 4)}, 1},
		{"a handed over between b's reads", []map[uint32]uint64{m(1, 3), m()}, []map[uint32]uint64{m(), m(1, 4)}, 0},
		{"a stopped, b started after", []map[uint32]uint64{m(1, 3), m()}, []map[uint32]uint64{m(), m()}, 0},
		{"a's epoch moved", []map[uint32]uint64{m(1, 3), m(1, 4)}, []map[uint32]uint64{m(1, 5), m()}, 0},
		{"other shards", []map[uint32]uint64{m(1, 3), m(2, 4)}, []map[uint32]uint64{m(1, 3), m(2, 4)}, 0},
	} {
		if got := spanOverlaps(ids, c.first, c.second); len(got) != c.want {
			t.Errorf("%s: %d overlaps %v, want %d", c.name, len(got), got, c.want)
		}
	}
}
