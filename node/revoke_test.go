package node

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/ledger"
)

// rawRPCAccepted dials addr over TLS with cfg, sends the RPC protocol byte
// and reports whether the server keeps the connection open (a read times
// out after wait) rather than closing it (the handshake's refusal).
func rawRPCAccepted(t *testing.T, addr string, cfg *tls.Config, wait time.Duration) bool {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(&d, "tcp", addr, cfg)
	if err != nil {
		return false // refused during the handshake
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte{0x02}); err != nil {
		return false
	}
	var b [1]byte
	_, err = c.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// certSerial is the serial of the certificate in PEM file path, as
// `openssl x509 -serial` prints it.
func certSerial(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToUpper(c.SerialNumber.Text(16))
}

// ownsAny reports whether st has a shard owned (or being revoked from) id.
func ownsAny(st *ledger.State, id string) bool {
	for _, r := range st.Shards() {
		if r.Owner == id && r.State != ledger.ShardUnowned {
			return true
		}
	}
	return false
}

// TestRevokedNodeIsRefused: a real three-node TLS cluster at version 5;
// a voter-capable node (an admin request to its API) revokes a follower
// that owns shards. Every other node then refuses that follower's
// certificate at its next connection (the raw RPC dial is closed after
// the handshake, where it was kept open before), the follower owns
// nothing, the leader drops it from the Raft configuration, and the other
// two keep a leader among themselves and keep committing. Then an
// operator certificate revoked by its serial (uppercase, as openssl prints
// it) is refused the same way.
func TestRevokedNodeIsRefused(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := tlsFilesRoles(t, dir, map[string]certs.Role{"n1": certs.RoleNode, "n2": certs.RoleNode, "n3": certs.RoleNode, "ops": certs.RoleOperator})
	tc := newCluster(t, 3, func(i int, c *Config) {
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = ca, cert[c.NodeID], key[c.NodeID]
	})
	ctx := tc.ctx()
	leader := tc.nodes[0].Health().ControlLeader
	var victim, admin *Node
	var victimIdx int
	for i, n := range tc.nodes {
		if n.ID() == leader {
			admin = n
		} else if victim == nil {
			victim, victimIdx = n, i
		}
	}
	if admin == nil || victim == nil {
		t.Fatalf("leader %q not among the nodes", leader)
	}
	if v := admin.be.(upgradeBackend).ledgerState().ActiveVersion(); v < ledger.VersionRevocation {
		t.Fatalf("cluster runs version %d, the test needs %d", v, ledger.VersionRevocation)
	}
	st := func(n *Node) *ledger.State { return n.be.(upgradeBackend).ledgerState() }
	if !waitTrue(ctx, func() bool { return ownsAny(st(admin), victim.ID()) }) {
		t.Fatalf("%s never owned a shard", victim.ID())
	}
	rl, err := certs.NewReloader(certs.Files{CA: ca, Cert: cert[victim.ID()], Key: key[victim.ID()]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaderAddr := tc.cfgs[0].RaftAddr
	for i, n := range tc.nodes {
		if n == admin {
			leaderAddr = tc.cfgs[i].RaftAddr
		}
	}
	if !rawRPCAccepted(t, leaderAddr, rl.ClientConfig(), 300*time.Millisecond) {
		t.Fatalf("before the revocation, %s's certificate was refused by the leader", victim.ID())
	}

	revokedAt := time.Now()
	if err := admin.RevokeNode(ctx, victim.ID(), "", "stolen key", false); err != nil {
		t.Fatalf("revoke %s: %v", victim.ID(), err)
	}
	for _, n := range tc.nodes {
		if n == victim {
			continue
		}
		if !waitTrue(ctx, func() bool { _, ok := st(n).Revoked(victim.ID(), ""); return ok }) {
			t.Fatalf("%s never applied the revocation", n.ID())
		}
	}
	if rawRPCAccepted(t, leaderAddr, rl.ClientConfig(), 5*time.Second) {
		t.Fatalf("after the revocation, the leader kept a connection with %s's certificate open", victim.ID())
	}
	ctx = tc.ctx() // each phase gets its own deadline: the move waits out the victim's lease
	if !waitTrue(ctx, func() bool { return !ownsAny(st(admin), victim.ID()) }) {
		t.Fatalf("%s still owns shards %s after its revocation", victim.ID(), time.Since(revokedAt))
	}
	t.Logf("%s owned nothing %s after its revocation", victim.ID(), time.Since(revokedAt).Round(time.Millisecond))
	// The leader removes the revoked voter from the Raft configuration at
	// once (planReconcile's "revoked"), not after DeadVoterTimeout.
	if !waitTrue(ctx, func() bool { return !slices.Contains(admin.be.(*netBackend).ctl.Voters(), victim.ID()) }) {
		t.Fatalf("%s is still a voter: %v", victim.ID(), admin.be.(*netBackend).ctl.Voters())
	}
	// One certificate by its serial: an operator's, whose name is no
	// node id, is refused from then on.
	ops, err := certs.NewReloader(certs.Files{CA: ca, Cert: cert["ops"], Key: key["ops"]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rawRPCAccepted(t, leaderAddr, ops.ClientConfig(), 300*time.Millisecond) {
		t.Fatal("the operator certificate was refused before its revocation")
	}
	if err := admin.RevokeNode(ctx, "", certSerial(t, cert["ops"]), "operator left", false); err != nil {
		t.Fatalf("revoke the operator's serial: %v", err)
	}
	if !waitTrue(ctx, func() bool { return !rawRPCAccepted(t, leaderAddr, ops.ClientConfig(), 300*time.Millisecond) }) {
		t.Fatal("the operator certificate is still accepted after its serial was revoked")
	}
	if err := victim.RevokeNode(ctx, "n9", "", "", false); err == nil {
		t.Fatalf("the revoked %s still commits", victim.ID())
	}
	// The other two keep their leader and commit.
	ctx = tc.ctx()
	j, _, err := admin.Enqueue(ctx, JobSpec{Key: "after-the-revocation", Type: "t"})
	if err != nil {
		t.Fatalf("enqueue after the revocation: %v", err)
	}
	for i, n := range tc.nodes {
		if i == victimIdx {
			continue
		}
		if !waitTrue(ctx, func() bool { _, err := n.Job(j.ID); return err == nil }) {
			t.Fatalf("%s never applied the job", n.ID())
		}
		// Not necessarily the same leader: under load the two may elect
		// again (the revoked node cannot take part: its pre-votes are
		// refused at the handshake), but never the revoked node.
		if !waitTrue(ctx, func() bool { l := n.Health().ControlLeader; return l != "" && l != victim.ID() }) {
			t.Fatalf("%s: leader %q after the revocation", n.ID(), n.Health().ControlLeader)
		}
	}
}
