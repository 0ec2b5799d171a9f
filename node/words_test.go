package node

import (
	"testing"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// TestHandoffOnWord: three real TLS nodes that opt in to the unreleased
// cluster version 6 (speakMax, as $TENURE_UNRELEASED_VERSION does)
// finalize it, and a drain hands shards over on the old owner's word:
// its Transfers reach the leader (forwarded over the RPC port, or the
// leader's own), the targets' asks (Control.Words) carry them, and the
// targets start acting before the Transfers apply (wordStarts). Every
// shard then has a committed owner other than the drained node.
func TestHandoffOnWord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	ca, cert, key := tlsFiles(t, t.TempDir(), "n1", "n2", "n3") // words need TLS
	tc := newCluster(t, 3, func(_ int, c *Config) {
		c.speakMax = ledger.VersionHandoffWords
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
		if !waitTrue(ctx, func() bool { return len(victim.Owned()) > 0 }) {
			t.Fatalf("test premise: %s owns no shard to drain", victim.ID())
		}
		if err := victim.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		starts = 0
		for _, n := range tc.nodes {
			starts += n.be.(*netBackend).wordStarts.Load()
		}
		if starts > 0 {
			break
		}
		t.Logf("draining %s: every shard started on the commit", victim.ID())
	}
	if starts == 0 {
		t.Fatal("no shard was handed over on a word in three drains")
	}
	st := tc.nodes[0].be.(*netBackend).fsm.State()
	if !waitTrue(ctx, func() bool {
		st = tc.nodes[0].be.(*netBackend).fsm.State()
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
	t.Logf("%d starts on a word", starts)
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

// TestConfigFromEnvUnreleased: the opt-in to version 6 is read from the
// environment ConfigFromEnv is given, not the process's.
func TestConfigFromEnvUnreleased(t *testing.T) {
	env := func(k string) string {
		if k == UnreleasedVersionEnv {
			return "6"
		}
		return ""
	}
	if c := ConfigFromEnv(env); c.speakMax != ledger.VersionHandoffWords {
		t.Fatalf("speakMax %d with %s=6, want %d", c.speakMax, UnreleasedVersionEnv, ledger.VersionHandoffWords)
	}
	t.Setenv(UnreleasedVersionEnv, "6")
	if c := ConfigFromEnv(func(string) string { return "" }).withDefaults(); c.speakMax != 0 {
		t.Fatalf("speakMax %d from the process environment, want 0 (not in the given one)", c.speakMax)
	}
}
