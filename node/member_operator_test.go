package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/ledger"
)

// tlsFilesRoles writes a CA and a certificate of the given role for each
// id into dir.
func tlsFilesRoles(t *testing.T, dir string, roles map[string]certs.Role) (ca string, cert, key map[string]string) {
	t.Helper()
	caCert, caKey, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, caCert, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key = map[string]string{}, map[string]string{}
	for id, role := range roles {
		c, k, err := certs.Issue(caCert, caKey, certs.Identity{Name: id, Role: role}, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert[id], key[id] = filepath.Join(dir, id+".pem"), filepath.Join(dir, id+"-key.pem")
		if err := os.WriteFile(cert[id], c, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key[id], k, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// TestMemberOperatorActionsRefused: a real TLS cluster of three voters and
// a --voter=never member with a member certificate (tenure://member/n4).
// The member forwards every operator action — a pin, an exclusion of the
// leader, fenced takeover of every shard, the ClusterConfig halt and a
// same-version ClusterConfig, job settings, logged settings, forgetting
// and revoking the leader, draining another node — and the leader refuses
// each with ErrUnauthorized: its leadership, the committed configuration,
// the placement rules, the deny-list, the settings and every node's
// draining flag are as before, and the cluster still commits what a
// member may propose (an enqueue).
func TestMemberOperatorActionsRefused(t *testing.T) {
	ca, cert, key := tlsFilesRoles(t, t.TempDir(), map[string]certs.Role{
		"n1": certs.RoleNode, "n2": certs.RoleNode, "n3": certs.RoleNode, "n4": certs.RoleMember})
	tc := newCluster(t, 4, func(i int, c *Config) {
		c.BootstrapExpect = 3
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = ca, cert[c.NodeID], key[c.NodeID]
		if c.NodeID == "n4" {
			c.Voter = VoterNever
		}
	})
	ctx := tc.ctx()
	member := tc.nodes[3]
	leader := tc.nodes[0].Health().ControlLeader
	if leader == "" || leader == member.ID() {
		t.Fatalf("control-group leader %q", leader)
	}
	ub := member.be.(upgradeBackend)
	st := ub.ledgerState()
	if v := st.ActiveVersion(); v < ledger.VersionLeastPrivilege {
		t.Fatalf("cluster runs version %d, the rule needs %d", v, ledger.VersionLeastPrivilege)
	}
	before := st
	ci := st.Cluster()
	other := "n2"
	if other == leader {
		other = "n3"
	}
	lrec, _ := st.Node(leader)
	now := time.Now().UnixNano()
	for _, cmd := range []ledger.Command{
		ledger.PinShard{Shard: 0, Node: member.ID(), Reason: "mine", Now: now},
		ledger.ExcludeNode{Node: leader, Exclude: true, Reason: "gone", Now: now},
		ledger.SetTakeoverPolicy{First: 0, Last: ci.Partitions - 1, Fenced: true, Now: now},
		ledger.ClusterConfig{Name: ci.Name, Partitions: ci.Partitions, Version: 1 << 31, Now: now},
		ledger.ClusterConfig{Name: ci.Name, Partitions: ci.Partitions, Version: ci.Version, Now: now},
		ledger.Settings{JobRetention: 1, MaxFinishedJobs: 1, DefaultMaxAttempts: 1, Now: now},
		ledger.LogSettingsOf(ledger.DefaultConfig().Settings(), now),
		ledger.ForgetNode{Node: leader, Incarnation: lrec.Incarnation, Liveness: lrec.Liveness, Seq: lrec.Seq, Now: now},
		ledger.RevokeNode{Node: leader, Reason: "mine now", Now: now},
		ledger.SetDraining{Node: other, Draining: true, Now: now},
	} {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := ub.commitCommand(cctx, cmd)
		cancel()
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s forwarded by member %s: %v, want ErrUnauthorized", ledger.KindOf(cmd), member.ID(), err)
		}
	}
	// What a member may propose still commits, and every replica applies it.
	j, _, err := member.Enqueue(ctx, JobSpec{Key: "after-the-member", Type: "t"})
	if err != nil {
		t.Fatalf("enqueue through the member: %v", err)
	}
	for _, n := range tc.nodes {
		if !waitTrue(ctx, func() bool { _, err := n.Job(j.ID); return err == nil }) {
			t.Fatalf("%s never applied the job", n.ID())
		}
		h := n.Health()
		if h.ControlLeader != leader || h.ReplicaHaltedAt != 0 {
			t.Fatalf("%s: leader %q (was %q), halted at %d", n.ID(), h.ControlLeader, leader, h.ReplicaHaltedAt)
		}
		after := n.be.(upgradeBackend).ledgerState()
		switch {
		case after.Cluster() != before.Cluster():
			t.Errorf("%s: cluster config %+v, was %+v", n.ID(), after.Cluster(), before.Cluster())
		case len(after.Pins()) != 0 || len(after.Excluded()) != 0 || len(after.FencedRanges()) != 0 || len(after.Revocations()) != 0:
			t.Errorf("%s: pins %v, exclusions %v, fenced %v, revocations %v: want none", n.ID(), after.Pins(), after.Excluded(), after.FencedRanges(), after.Revocations())
		case after.Settings() != before.Settings():
			t.Errorf("%s: settings %+v, were %+v", n.ID(), after.Settings(), before.Settings())
		}
		if i := slices.IndexFunc(after.Nodes(), func(r ledger.NodeRecord) bool { return r.Draining }); i >= 0 {
			t.Errorf("%s: node %s is draining", n.ID(), after.Nodes()[i].ID)
		}
		if _, ok := after.Node(leader); !ok {
			t.Errorf("%s: the leader's record is gone", n.ID())
		}
	}
}
