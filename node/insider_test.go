package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/ledger"
)

// tlsFiles writes a CA and a node certificate for each of ids into dir.
func tlsFiles(t *testing.T, dir string, ids ...string) (ca string, cert, key map[string]string) {
	t.Helper()
	roles := map[string]certs.Role{}
	for _, id := range ids {
		roles[id] = certs.RoleNode
	}
	return tlsFilesRoles(t, dir, roles)
}

// TestInsiderIsRefused (the rows a node certificate can try against a real
// TLS cluster; the HTTP rows are httpapi's TestAPIThreeScopes and
// TestAPIBrowserSafety, the gossip row cluster's TestGossipIDTakeoverIgnored):
// a follower forwards the ClusterConfig that halted every replica, another
// node's heartbeat at 2^64-1 (locking it out), a grant to itself and an
// expiry of the leader. Each is refused with ErrUnauthorized; the cluster
// keeps its leader, its version and every replica applying.
func TestInsiderIsRefused(t *testing.T) {
	ca, cert, key := tlsFiles(t, t.TempDir(), "n1", "n2", "n3")
	tc := newCluster(t, 3, func(i int, c *Config) {
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = ca, cert[c.NodeID], key[c.NodeID]
	})
	ctx := tc.ctx()
	leader := tc.nodes[0].Health().ControlLeader
	if leader == "" {
		t.Fatal("no control-group leader")
	}
	var insider *Node
	for _, n := range tc.nodes {
		if n.ID() != leader {
			insider = n
			break
		}
	}
	ub := insider.be.(upgradeBackend)
	st := ub.ledgerState()
	ci := st.Cluster()
	version := st.ActiveVersion()
	victim := leader
	for _, cmd := range []ledger.Command{
		ledger.ClusterConfig{Name: ci.Name, Partitions: ci.Partitions, Version: 1 << 31, Now: time.Now().UnixNano()},
		ledger.Heartbeat{Node: victim, Incarnation: ^uint64(0), Now: time.Now().UnixNano(), MinVersion: 1, MaxVersion: ledger.MaxClusterVersion},
		ledger.Grant{Shard: 0, Owner: insider.ID(), Now: time.Now().UnixNano()},
		ledger.ExpireNode{Node: victim, Now: time.Now().UnixNano()},
	} {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := ub.commitCommand(cctx, cmd)
		cancel()
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s forwarded by %s: %v, want ErrUnauthorized", ledger.KindOf(cmd), insider.ID(), err)
		}
	}
	// The cluster is as it was and still commits: a job enqueued through
	// the insider is applied by every replica.
	j, _, err := insider.Enqueue(ctx, JobSpec{Key: "after-the-insider", Type: "t"})
	if err != nil {
		t.Fatalf("enqueue after the refusals: %v", err)
	}
	for _, n := range tc.nodes {
		if !waitTrue(ctx, func() bool { _, err := n.Job(j.ID); return err == nil }) {
			t.Fatalf("%s never applied the job", n.ID())
		}
		if h := n.Health(); h.ControlLeader != leader || h.ReplicaHaltedAt != 0 {
			t.Fatalf("%s: leader %q (was %q), halted at %d", n.ID(), h.ControlLeader, leader, h.ReplicaHaltedAt)
		}
		if v := n.be.(upgradeBackend).ledgerState().ActiveVersion(); v != version {
			t.Fatalf("%s runs cluster version %d, was %d", n.ID(), v, version)
		}
	}
}
