// Package certs issues and loads the certificates that prove who a cluster
// member is: a cluster CA, one certificate per node carrying its node id,
// and operator certificates. Identities live in a URI SAN
// (tenure://node/<id>, tenure://member/<id>, tenure://operator/<name>).
// Reloader re-reads the files when they change, so certificates rotate
// without a restart.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Role of a certificate holder.
type Role string

// The roles (docs/security.md, "Roles").
const (
	// RoleNode: a voter-capable node (--voter=auto|always, or a
	// --voter=never node of a cluster below version 5); Name is its node
	// id. Only this role may speak Raft.
	RoleNode Role = "node"
	// RoleMember: a member (--voter=never) that never holds Raft state;
	// Name is its node id. It uses the RPC path only (renewals, proposals,
	// the committed-state stream).
	RoleMember Role = "member"
	// RoleOperator: an operator or client; Name is the operator's name.
	RoleOperator Role = "operator"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == RoleNode || r == RoleMember || r == RoleOperator }

// Identity is who a certificate says its holder is.
type Identity struct {
	Name string
	Role Role
}

// ErrNoIdentity: a certificate without a tenure identity.
var ErrNoIdentity = errors.New("pki: certificate carries no tenure identity")

const scheme = "tenure"

func validName(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("pki: name %q must be 1..64 bytes", s)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '/' {
			return fmt.Errorf("pki: name %q contains %q", s, r)
		}
	}
	return nil
}

// IdentityOf reads the identity from a certificate's URI SAN.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, ErrNoIdentity
	}
	for _, u := range cert.URIs {
		if u.Scheme != scheme {
			continue
		}
		name, err := url.PathUnescape(strings.TrimPrefix(u.Path, "/"))
		if err != nil {
			return Identity{}, fmt.Errorf("%w: %v", ErrNoIdentity, err)
		}
		role := Role(u.Host)
		if !role.Valid() {
			return Identity{}, fmt.Errorf("%w: unknown role %q", ErrNoIdentity, u.Host)
		}
		if err := validName(name); err != nil {
			return Identity{}, fmt.Errorf("%w: %v", ErrNoIdentity, err)
		}
		return Identity{Name: name, Role: role}, nil
	}
	return Identity{}, ErrNoIdentity
}

// PeerIdentity returns the identity of the peer of a completed handshake
// made with one of Reloader's configs (which verify the chain).
func PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, fmt.Errorf("%w: the peer presented no certificate", ErrNoIdentity)
	}
	return IdentityOf(cs.PeerCertificates[0])
}

// newTemplate makes a fresh P-256 key and a certificate template with a
// random 128-bit serial, valid from an hour ago (clock skew) for validFor.
func newTemplate(validFor time.Duration) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	return key, &x509.Certificate{SerialNumber: sn, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor)}, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// NewCA creates a cluster CA (ECDSA P-256).
func NewCA(cluster string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	key, tmpl, err := newTemplate(validFor)
	if err != nil {
		return nil, nil, err
	}
	tmpl.Subject = pkix.Name{CommonName: "tenure CA " + cluster}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

// Issue signs a certificate for id with the CA; hosts become DNS or IP SANs.
func Issue(caCertPEM, caKeyPEM []byte, id Identity, hosts []string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := validName(id.Name); err != nil {
		return nil, nil, err
	}
	if !id.Role.Valid() {
		return nil, nil, fmt.Errorf("pki: unknown role %q", id.Role)
	}
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA: %w", err)
	}
	key, tmpl, err := newTemplate(validFor)
	if err != nil {
		return nil, nil, err
	}
	tmpl.Subject = pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)}}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.URIs = []*url.URL{{Scheme: scheme, Host: string(id.Role), Path: "/" + url.PathEscape(id.Name)}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

// Files names the PEM files of one holder.
type Files struct{ CA, Cert, Key string }

type material struct {
	cert  tls.Certificate
	pool  *x509.CertPool
	id    Identity
	stamp string
}

// Reloader serves a holder's certificate and the CA pool from disk,
// re-reading them (at most once a second, on use) when a file's size or
// modification time changes. A failed re-read keeps the previous material.
type Reloader struct {
	files Files
	log   *slog.Logger
	now   func() time.Time
	// keyPair: only Cert and Key, any certificate (see NewKeyPairReloader).
	keyPair bool

	mu      sync.Mutex
	cur     *material
	checked time.Time
	lastErr error
}

// NewReloader loads the files, failing with an error that names the bad one.
func NewReloader(f Files, log *slog.Logger) (*Reloader, error) {
	return newReloader(f, false, log)
}

// NewKeyPairReloader serves a plain server certificate and key — any
// certificate, from any CA, without a tenure identity (the HTTP API's) —
// re-read like NewReloader's. Use it through GetCertificate.
func NewKeyPairReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	return newReloader(Files{Cert: certFile, Key: keyFile}, true, log)
}

func newReloader(f Files, keyPair bool, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{files: f, log: log, now: time.Now, keyPair: keyPair}
	m, err := load(f, keyPair)
	if err != nil {
		return nil, err
	}
	r.cur, r.checked = m, r.now()
	return r, nil
}

// GetCertificate returns the current certificate, re-read if its files
// changed; it is a tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.current().cert
	return &c, nil
}

func stamp(f Files) (string, error) {
	var b strings.Builder
	paths := []string{f.CA, f.Cert, f.Key}
	if f.CA == "" {
		paths = paths[1:] // a key pair (NewKeyPairReloader); load refuses a missing CA otherwise
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("pki: %w", err)
		}
		fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

func load(f Files, keyPair bool) (*material, error) {
	st, err := stamp(f)
	if err != nil {
		return nil, err
	}
	var pool *x509.CertPool
	if !keyPair {
		caPEM, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("pki: CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("pki: CA file %s holds no PEM certificate", f.CA)
		}
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: key file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s / %s: %w", f.Cert, f.Key, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", f.Cert, err)
	}
	if keyPair {
		cert.Leaf = leaf
		return &material{cert: cert, stamp: st}, nil
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("pki: %s is not valid under the CA in %s: %w", f.Cert, f.CA, err)
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", f.Cert, err)
	}
	cert.Leaf = leaf
	return &material{cert: cert, pool: pool, id: id, stamp: st}, nil
}

// current returns the material, re-reading the files if they changed.
func (r *Reloader) current() *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < time.Second {
		return r.cur
	}
	r.checked = now
	st, err := stamp(r.files)
	if err == nil && st == r.cur.stamp {
		return r.cur
	}
	m, err := load(r.files, r.keyPair)
	if err != nil {
		if r.lastErr == nil || r.lastErr.Error() != err.Error() {
			if r.log != nil {
				r.log.Error("pki: reload failed; keeping the previous certificates", "err", err)
			}
		}
		r.lastErr = err
		return r.cur
	}
	r.lastErr = nil
	if r.log != nil && !bytes.Equal(m.cert.Certificate[0], r.cur.cert.Certificate[0]) {
		r.log.Info("pki: certificates reloaded", "cert", r.files.Cert)
	}
	r.cur = m
	return m
}

// Identity is the identity of the current own certificate.
func (r *Reloader) Identity() Identity { return r.current().id }

// LastError is the last failed reload, nil after a good one.
func (r *Reloader) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

func verify(pool *x509.CertPool, rawCerts [][]byte, usage x509.ExtKeyUsage) (Identity, error) {
	if len(rawCerts) == 0 {
		return Identity{}, errors.New("pki: no certificate presented")
	}
	certs := make([]*x509.Certificate, len(rawCerts))
	for i, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return Identity{}, fmt.Errorf("pki: bad peer certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Identity{}, fmt.Errorf("pki: peer certificate: %w", err)
	}
	return IdentityOf(certs[0])
}

// ServerConfig is a mutual-TLS server config: the peer must present a
// certificate of the current CA carrying an identity (any role).
//
// Session tickets are off: Go verifies a client certificate only on a full
// handshake (VerifyPeerCertificate is not called on resumption), so a
// resumed session would outlive a rotated CA for the ticket's 7 days.
// Every connection does a full handshake against the current CA.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:             tls.VersionTLS13,
				SessionTicketsDisabled: true,
				Certificates:           []tls.Certificate{m.cert},
				ClientAuth:             tls.RequireAnyClientCert,
				VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
					_, err := verify(m.pool, raw, x509.ExtKeyUsageClientAuth)
					return err
				},
			}, nil
		},
	}
}

// ClientConfig presents the current certificate and accepts only a server
// with a node or member certificate of the current CA (no host name check:
// node ids are not host names). A member serves the RPC path only; the
// Raft dialer checks the server's role itself (cluster: raftStream.Dial).
func (r *Reloader) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // verified in VerifyPeerCertificate
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := r.current().cert
			return &c, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			id, err := verify(r.current().pool, raw, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if id.Role != RoleNode && id.Role != RoleMember {
				return fmt.Errorf("pki: server presented a %s certificate (%s), not a node's or a member's", id.Role, id.Name)
			}
			return nil
		},
	}
}
