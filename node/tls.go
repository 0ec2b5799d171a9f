package node

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// tlsConfigured reports whether c names TLS files (all three, checked by
// Validate).
func (c Config) tlsConfigured() bool {
	return c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != ""
}

// isLoopbackAddr reports whether a host:port (or host) names only this
// machine: a loopback IP or "localhost". Wildcard and unparseable
// addresses are not loopback.
func isLoopbackAddr(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// raftLoopback reports whether the control-group port is reachable only
// from this machine.
func (c Config) raftLoopback() bool {
	return isLoopbackAddr(c.RaftAddr) && (c.RaftAdvertise == "" || isLoopbackAddr(c.RaftAdvertise))
}

// gossipLoopback reports whether the gossip port is reachable only from
// this machine.
func (c Config) gossipLoopback() bool {
	return isLoopbackAddr(c.GossipAddr) && (c.GossipAdvertise == "" || isLoopbackAddr(c.GossipAdvertise))
}

// validateGossipKey adds to bad a gossip port open off loopback without a
// key (and without Insecure).
func (c Config) validateGossipKey(bad func(format string, args ...any)) {
	if c.Network != nil || c.Insecure || len(c.EncryptionKey) > 0 || c.gossipLoopback() {
		return
	}
	if c.DataDir != "" && keyringFileExists(c.DataDir) {
		return
	}
	bad("GossipAddr %q / GossipAdvertise %q is not loopback and no gossip EncryptionKey is set: any process that reaches a seed "+
		"could join and read the ledger (set EncryptionKey — `tenure keygen` makes one — or Insecure to run without)",
		c.GossipAddr, c.GossipAdvertise)
}

// validateTLS adds the TLS problems of c to bad.
func (c Config) validateTLS(bad func(format string, args ...any)) {
	if c.Network != nil {
		return
	}
	if c.tlsConfigured() {
		if c.TLSCAFile == "" || c.TLSCertFile == "" || c.TLSKeyFile == "" {
			bad("TLSCAFile %q, TLSCertFile %q and TLSKeyFile %q: set all three or none", c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile)
		}
		return
	}
	if !c.Insecure && !c.raftLoopback() {
		bad("RaftAddr %q / RaftAdvertise %q is not loopback and no TLS certificate is set: peers must prove who they are "+
			"(set TLSCAFile, TLSCertFile and TLSKeyFile — `tenure tls init` writes them — or Insecure to run without)",
			c.RaftAddr, c.RaftAdvertise)
	}
}

// controlSecurity sets the mutual-TLS stream layer, authentication and
// command authorization of the control group from cfg's TLS files. Without
// them (loopback or Insecure) the control group trusts every peer.
func controlSecurity(cc *cluster.ControlConfig, cfg Config, fsm *ledger.FSM, log *slog.Logger) error {
	if !cfg.tlsConfigured() {
		if cfg.Insecure && !cfg.raftLoopback() && log != nil {
			log.Warn("node: INSECURE: the control-group port accepts any peer without TLS; anyone who reaches " +
				cfg.RaftAddr + " can commit any command (Insecure is set)")
		}
		return nil
	}
	rl, err := certs.NewReloader(certs.Files{CA: cfg.TLSCAFile, Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile}, log)
	if err != nil {
		return fmt.Errorf("node: TLS: %w", err)
	}
	if err := checkOwnCertificate(rl.Identity(), cfg); err != nil {
		return err
	}
	if id := rl.Identity(); id.Role == certs.RoleNode && cfg.Voter == VoterNever && log != nil {
		// Allowed (members of clusters below version 5 keep theirs), but a
		// node certificate is voter-capable to the cluster: it may propose
		// operator actions (docs/security.md, "What each party can do").
		log.Warn("node: TLS: this --voter=never node holds a node certificate, which the cluster treats as voter-capable "+
			"(it may propose operator actions); once the cluster runs version 5 give it a member certificate "+
			"(tenure tls cert --member) and revoke this one (tenure node revoke --serial)", "cert", cfg.TLSCertFile)
	}
	inner := cc.StreamLayer
	if inner == nil {
		inner, err = cluster.NewTCPStreamLayer(cc.BindAddr, cc.AdvertiseAddr)
		if err != nil {
			return err
		}
	}
	cc.StreamLayer = cluster.NewTLSStreamLayer(inner, rl.ServerConfig(), rl.ClientConfig())
	cc.Authenticate = cluster.TLSAuthenticator(peerFromTLS)
	cc.Authorize = func(p cluster.Peer, cmd []byte) error {
		c, err := ledger.Decode(cmd)
		if err != nil {
			return err
		}
		return ledger.Authorize(fsm.State(), ledger.Proposer{ID: p.ID, Operator: p.IsOperator(), Voter: p.VoterCapable()}, c)
	}
	cc.Revoked = func(p cluster.Peer) error { return peerRevoked(fsm.State(), p) }
	return nil
}

// peerRevoked is the deny-list check of a proven peer (RevokeNode): its
// node id (an operator's name is not a node id) or its certificate's
// serial is on the committed list of this node's replica.
func peerRevoked(st *ledger.State, p cluster.Peer) error {
	id := p.ID
	if p.IsOperator() {
		id = ""
	}
	r, ok := st.Revoked(id, p.Serial)
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: %s (certificate serial %s) is on the deny-list: node %q serial %q, %q",
		cluster.ErrPeerRevoked, p, p.Serial, r.Node, r.Serial, r.Reason)
}

// checkOwnCertificate refuses to start with a certificate that is not this
// node's, or whose role does not fit its Voter preference: a member
// certificate (tenure://member/<id>) only with VoterNever, since the Raft
// port of every voter refuses it. A node certificate fits every
// preference (VoterNever nodes of a cluster below version 5 keep theirs;
// docs/upgrades.md).
func checkOwnCertificate(id certs.Identity, cfg Config) error {
	if (id.Role != certs.RoleNode && id.Role != certs.RoleMember) || id.Name != cfg.NodeID {
		return fmt.Errorf("node: TLS: certificate %s is for %s %q, but this node is %q: issue one with `tenure tls cert --node %s` "+
			"(add --member for a --voter=never member)", cfg.TLSCertFile, id.Role, id.Name, cfg.NodeID, cfg.NodeID)
	}
	if id.Role == certs.RoleMember && cfg.Voter != VoterNever {
		voter := cfg.Voter
		if voter == "" {
			voter = VoterAuto
		}
		return fmt.Errorf("node: TLS: certificate %s is a member certificate (tenure://member/%s), which cannot speak Raft, but this node "+
			"runs with Voter %q: run a member with --voter=never, or give a voter-capable node a node certificate (`tenure tls cert --node %s`)",
			cfg.TLSCertFile, id.Name, voter, id.Name)
	}
	return nil
}

// peerRoles maps certificate roles to the control group's.
var peerRoles = map[certs.Role]cluster.Role{
	certs.RoleNode:     cluster.RoleNode,
	certs.RoleMember:   cluster.RoleMember,
	certs.RoleOperator: cluster.RoleOperator,
}

// peerFromTLS names a verified peer and its role from its certificate.
func peerFromTLS(cs tls.ConnectionState) (cluster.Peer, error) {
	id, err := certs.PeerIdentity(cs)
	if err != nil {
		return cluster.Peer{}, err
	}
	role, ok := peerRoles[id.Role]
	if !ok {
		return cluster.Peer{}, fmt.Errorf("node: certificate role %q has no control-group role", id.Role)
	}
	serial := ""
	if len(cs.PeerCertificates) > 0 {
		serial = ledger.NormalizeSerial(cs.PeerCertificates[0].SerialNumber.Text(16))
	}
	return cluster.Peer{ID: id.Name, Role: role, Serial: serial}, nil
}
