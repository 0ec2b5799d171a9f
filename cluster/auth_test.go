package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/cluster/internal/raftwire"
	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// testPKI is a cluster CA on disk with certificates issued on demand.
type testPKI struct {
	t             testing.TB
	dir           string
	caCert, caKey []byte
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	cert, key, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, dir: dir, caCert: cert, caKey: key}
}

// reloader issues a certificate for id and loads it.
func (p *testPKI) reloader(id certs.Identity) *certs.Reloader {
	p.t.Helper()
	cert, key, err := certs.Issue(p.caCert, p.caKey, id, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	name := string(id.Role) + "-" + id.Name
	cf, kf := filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	if err := os.WriteFile(cf, cert, 0o600); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(kf, key, 0o600); err != nil {
		p.t.Fatal(err)
	}
	r, err := certs.NewReloader(certs.Files{CA: filepath.Join(p.dir, "ca.pem"), Cert: cf, Key: kf}, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return r
}

func testPeerOf(cs tls.ConnectionState) (Peer, error) {
	id, err := certs.PeerIdentity(cs)
	if err != nil {
		return Peer{}, err
	}
	role := map[certs.Role]Role{certs.RoleNode: RoleNode, certs.RoleMember: RoleMember, certs.RoleOperator: RoleOperator}[id.Role]
	return Peer{ID: id.Name, Role: role}, nil
}

// testAuthorize lets a peer propose "by:<its id>:..." commands only.
func testAuthorize(p Peer, cmd []byte) error {
	if !strings.HasPrefix(string(cmd), "by:"+p.ID+":") {
		return fmt.Errorf("%s may not propose %q", p, cmd)
	}
	return nil
}

// newSecureHarness runs control-group nodes over loopback TCP with mutual
// TLS, authentication and testAuthorize.
func newSecureHarness(t testing.TB, p *testPKI) *harness {
	h := newTCPHarness(t)
	h.cfg = func(c *ControlConfig) {
		r := p.reloader(certs.Identity{Name: c.NodeID, Role: certs.RoleNode})
		inner, err := NewTCPStreamLayer("127.0.0.1:0", "")
		if err != nil {
			t.Fatal(err)
		}
		c.StreamLayer = NewTLSStreamLayer(inner, r.ServerConfig(), r.ClientConfig())
		c.Authenticate = TLSAuthenticator(testPeerOf)
		c.Authorize = testAuthorize
		c.MaxRPCMessage = 1 << 20
	}
	return h
}

// newSteadySecureHarness is newSecureHarness with production-like Raft
// timeouts, for tests that check leadership does not move: with
// TestControlConfig's 150ms leader lease a leader starved of CPU (-race on
// a loaded 2-core CI box) steps down by itself, and an attack's
// "non-leader" is then the leader. An attack that works (a term bump, an
// accepted TimeoutNow) deposes the leader at once whatever these timeouts
// are.
func newSteadySecureHarness(t *testing.T, p *testPKI) *harness {
	h := newSecureHarness(t, p)
	secure := h.cfg
	h.cfg = func(c *ControlConfig) {
		secure(c)
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 2*time.Second
	}
	return h
}

// outsider is an attacker's connection to a node's Raft/RPC port.
type outsider struct {
	t    *testing.T
	addr string
	tls  *tls.Config // nil: plain TCP
}

func (o outsider) dial(proto byte) (net.Conn, error) {
	var c net.Conn
	var err error
	d := net.Dialer{Timeout: 5 * time.Second}
	if o.tls == nil {
		c, err = d.Dial("tcp", o.addr)
	} else {
		c, err = tls.DialWithDialer(&d, "tcp", o.addr, o.tls)
	}
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{proto}); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// apply sends Control.Apply and returns the reply or the transport error.
func (o outsider) apply(cmd string) (wire.ApplyReply, error) {
	c, err := o.dial(protoRPC)
	if err != nil {
		return wire.ApplyReply{}, err
	}
	cl := rpc.NewClient(c)
	defer cl.Close()
	var reply wire.ApplyReply
	err = cl.Call("Control.Apply", &wire.ApplyArgs{Cmd: []byte(cmd)}, &reply)
	return reply, err
}

func (o outsider) words(node string) (wire.WordsReply, error) {
	c, err := o.dial(protoRPC)
	if err != nil {
		return wire.WordsReply{}, err
	}
	cl := rpc.NewClient(c)
	defer cl.Close()
	var reply wire.WordsReply
	err = cl.Call("Control.Words", &wire.WordsArgs{Node: node}, &reply)
	return reply, err
}

func (o outsider) remove(id string) (wire.RemoveReply, error) {
	c, err := o.dial(protoRPC)
	if err != nil {
		return wire.RemoveReply{}, err
	}
	cl := rpc.NewClient(c)
	defer cl.Close()
	var reply wire.RemoveReply
	err = cl.Call("Control.Remove", &wire.RemoveArgs{ID: id, Leave: true}, &reply)
	return reply, err
}

// raft sends one raft message and reports whether the node answered (nil)
// or cut the connection.
func (o outsider) raft(typ byte, req any) error {
	c, err := o.dial(protoRaft)
	if err != nil {
		return err
	}
	defer c.Close()
	w := bufio.NewWriter(c)
	_ = w.WriteByte(typ)
	if err := codec.NewEncoder(w, &codec.MsgpackHandle{}).Encode(req); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	dec := codec.NewDecoder(bufio.NewReader(c), &codec.MsgpackHandle{})
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	return nil
}

// Every attack the security review made from outside the cluster — and as
// a member claiming another member's id — is refused, and the cluster stays
// healthy and commits afterwards.
func TestOutsiderIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	p := newTestPKI(t)
	// No attack may move leadership, so it must not move on its own.
	h := newSteadySecureHarness(t, p)
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
	leader := h.waitLeader(30 * time.Second)
	term := leader.g.EstablishedTerm()
	var follower *testNode
	for _, n := range h.running() {
		if n != leader {
			follower = n
			break
		}
	}

	other := newTestPKI(t) // another cluster's CA
	mallory := p.reloader(certs.Identity{Name: "mallory", Role: certs.RoleNode}).ClientConfig()
	asN2 := p.reloader(certs.Identity{Name: "n2", Role: certs.RoleNode}).ClientConfig()
	foreign := other.reloader(certs.Identity{Name: "n2", Role: certs.RoleNode}).ClientConfig()

	t.Run("no certificate", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tls  *tls.Config
		}{
			{"plain TCP", nil},
			{"TLS without client cert", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}},
		} {
			if r, err := (outsider{t, leader.addr, tc.tls}).apply("by:n1:forged"); err == nil {
				t.Errorf("%s: Control.Apply answered %+v, want the connection refused", tc.name, r)
			}
		}
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		if r, err := (outsider{t, leader.addr, foreign}).apply("by:n2:forged"); err == nil {
			t.Errorf("Control.Apply answered %+v, want the handshake refused", r)
		}
	})
	t.Run("member proposing for another", func(t *testing.T) {
		r, err := (outsider{t, leader.addr, mallory}).apply("by:n3:forged")
		if err != nil || r.Code != wire.CodeUnauthorized {
			t.Errorf("Control.Apply as mallory for n3 = %+v, %v; want CodeUnauthorized", r, err)
		}
		// Its own command is let through (the rule, not the port, decides).
		r, err = (outsider{t, leader.addr, asN2}).apply("by:n2:own")
		if err != nil || r.Code != wire.CodeOK {
			t.Errorf("Control.Apply as n2 for itself = %+v, %v; want OK", r, err)
		}
	})
	t.Run("words of another", func(t *testing.T) {
		// The handoff on a word (cluster version 6): a node may ask only
		// for the words relayed to itself; another's are refused before
		// anything is read (this harness offers no words at all).
		r, err := (outsider{t, leader.addr, asN2}).words("n3")
		if err != nil || r.Code != wire.CodeUnauthorized {
			t.Errorf("Control.Words as n2 for n3 = %+v, %v; want CodeUnauthorized", r, err)
		}
		r, err = (outsider{t, leader.addr, asN2}).words("n2")
		if err != nil || r.Code != wire.CodeUnsupported {
			t.Errorf("Control.Words as n2 for itself = %+v, %v; want CodeUnsupported (past the check)", r, err)
		}
	})
	t.Run("remove another voter", func(t *testing.T) {
		victim := "n3"
		if leader.id == victim {
			victim = "n1"
		}
		r, err := (outsider{t, leader.addr, asN2}).remove(victim)
		if err != nil || r.Code != wire.CodeUnauthorized {
			t.Errorf("Control.Remove of %s as n2 = %+v, %v; want CodeUnauthorized", victim, r, err)
		}
	})
	t.Run("raft as another server", func(t *testing.T) {
		hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n3"), Addr: []byte("127.0.0.1:1")}
		ae := raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1 << 40, PrevLogEntry: 1, Entries: []*raft.Log{{Index: 2, Term: 1 << 40, Type: raft.LogCommand, Data: []byte("by:n2:injected")}}}
		if err := (outsider{t, follower.addr, asN2}).raft(raftwire.AppendEntries, &ae); err == nil {
			t.Error("AppendEntries claiming n3 from n2's certificate was answered")
		}
		if err := (outsider{t, follower.addr, foreign}).raft(raftwire.AppendEntries, &ae); err == nil {
			t.Error("AppendEntries with another CA's certificate was answered")
		}
	})
	t.Run("TimeoutNow from a non-leader", func(t *testing.T) {
		// Even as itself, a member that does not lead may not make a
		// follower start an election.
		self := "n2"
		cfg := asN2
		if leader.id == "n2" {
			self, cfg = "mallory", mallory
		}
		req := raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(self), Addr: []byte("x")}}
		target := follower
		if target.id == self {
			for _, n := range h.running() {
				if n != leader && n.id != self {
					target = n
				}
			}
		}
		for i := 0; i < 20; i++ {
			if err := (outsider{t, target.addr, cfg}).raft(raftwire.TimeoutNow, &req); err == nil {
				t.Fatalf("TimeoutNow from %s (not the leader) was answered", self)
			}
		}
	})
	t.Run("malformed InstallSnapshot", func(t *testing.T) {
		req := raft.InstallSnapshotRequest{
			RPCHeader:       raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte("x")},
			SnapshotVersion: raft.SnapshotVersionMax, Term: 1, LastLogIndex: 1, LastLogTerm: 1,
			Configuration: []byte{0xff, 0x00, 0x13}, ConfigurationIndex: 1,
		}
		if err := (outsider{t, follower.addr, asN2}).raft(raftwire.InstallSnapshot, &req); err == nil {
			t.Error("InstallSnapshot with a malformed configuration was answered")
		}
	})
	t.Run("oversized RPC message", func(t *testing.T) {
		c, err := (outsider{t, leader.addr, asN2}).dial(protoRPC)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cl := rpc.NewClient(c)
		defer cl.Close()
		var reply wire.ApplyReply
		big := make([]byte, 4<<20) // the harness caps messages at 1 MiB
		err = cl.Call("Control.Apply", &wire.ApplyArgs{Cmd: append([]byte("by:n2:"), big...)}, &reply)
		if err == nil {
			t.Errorf("a 4 MiB message was served (reply %+v), want the connection closed", reply)
		}
	})

	// The cluster is unharmed: the same leader in the same term (no
	// election, not even one it won again), every node commits, and no
	// forged command was applied anywhere.
	if l := h.waitLeader(30 * time.Second); l.id != leader.id || l.g.EstablishedTerm() != term {
		t.Errorf("leader changed from %s (term %d) to %s (term %d) during the attacks", leader.id, term, l.id, l.g.EstablishedTerm())
	}
	var want []string
	for _, n := range h.running() {
		cmd := "by:" + n.id + ":after"
		h.apply(n, cmd, 30*time.Second)
		want = append(want, cmd)
	}
	h.waitApplied(30*time.Second, append([]string{"by:n2:own"}, want...))
	for _, n := range h.running() {
		for _, e := range n.fsm.entries() {
			if strings.Contains(e, "forged") || strings.Contains(e, "injected") {
				t.Errorf("%s applied %q", n.id, e)
			}
		}
	}
}

// A member's own forwarded commands pass through the leader's check; a
// command the rule refuses comes back as ErrUnauthorized, not retried.
func TestForwardedCommandAuthorized(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	h := newSecureHarness(t, newTestPKI(t))
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
	leader := h.waitLeader(30 * time.Second)
	for _, n := range h.running() {
		if n == leader {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := n.g.Apply(ctx, []byte("by:"+leader.id+":not-mine"))
		cancel()
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s forwarding a command about %s: err = %v, want ErrUnauthorized", n.id, leader.id, err)
		}
		h.apply(n, "by:"+n.id+":mine", 30*time.Second)
	}
}
