package certs

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func issueTo(t *testing.T, dir string, caCert, caKey []byte, id Identity) Files {
	t.Helper()
	c, k, err := Issue(caCert, caKey, id, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, id.Name+".pem"), Key: filepath.Join(dir, id.Name+"-key.pem")}
	if err := os.WriteFile(f.Cert, c, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, k, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func newCADir(t *testing.T) (string, []byte, []byte) {
	t.Helper()
	dir := t.TempDir()
	c, k, err := NewCA("t", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), c, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, c, k
}

// handshake runs a TLS handshake over a pipe and returns what each side
// saw of the other, or the first error.
func handshake(server, client *tls.Config) (srvSaw, cliSaw Identity, err error) {
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		return Identity{}, Identity{}, lerr
	}
	defer ln.Close()
	b, derr := net.Dial("tcp", ln.Addr().String())
	if derr != nil {
		return Identity{}, Identity{}, derr
	}
	a, aerr := ln.Accept()
	if aerr != nil {
		return Identity{}, Identity{}, aerr
	}
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	s := tls.Server(a, server)
	go func() {
		err := s.Handshake()
		if err != nil {
			a.Close()
		}
		errc <- err
	}()
	c := tls.Client(b, client)
	cerr := c.Handshake()
	serr := <-errc
	if cerr != nil {
		return Identity{}, Identity{}, cerr
	}
	if serr != nil {
		return Identity{}, Identity{}, serr
	}
	srvSaw, err = PeerIdentity(s.ConnectionState())
	if err != nil {
		return
	}
	cliSaw, err = PeerIdentity(c.ConnectionState())
	return
}

func TestHandshakes(t *testing.T) {
	dir, caC, caK := newCADir(t)
	n1, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"n1", RoleNode}), nil)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"n2", RoleNode}), nil)
	if err != nil {
		t.Fatal(err)
	}
	op, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"ops", RoleOperator}), nil)
	if err != nil {
		t.Fatal(err)
	}
	odir, oC, oK := newCADir(t)
	foreign, err := NewReloader(issueTo(t, odir, oC, oK, Identity{"n2", RoleNode}), nil)
	if err != nil {
		t.Fatal(err)
	}

	s, c, err := handshake(n1.ServerConfig(), n2.ClientConfig())
	if err != nil || s != (Identity{"n2", RoleNode}) || c != (Identity{"n1", RoleNode}) {
		t.Fatalf("n2→n1: server saw %+v, client saw %+v, err %v", s, c, err)
	}
	if s, _, err := handshake(n1.ServerConfig(), op.ClientConfig()); err != nil || s != (Identity{"ops", RoleOperator}) {
		t.Fatalf("operator client: %+v %v", s, err)
	}
	if _, _, err := handshake(op.ServerConfig(), n1.ClientConfig()); err == nil {
		t.Error("a node accepted an operator certificate as a server")
	}
	if _, _, err := handshake(n1.ServerConfig(), foreign.ClientConfig()); err == nil {
		t.Error("a server accepted a client of another CA")
	}
	if _, _, err := handshake(foreign.ServerConfig(), n1.ClientConfig()); err == nil {
		t.Error("a client accepted a server of another CA")
	}
	if _, _, err := handshake(n1.ServerConfig(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}); err == nil {
		t.Error("a server accepted a client without a certificate")
	}
}

// A member certificate names a member (tenure://member/<id>), distinct
// from a node certificate with the same id; it handshakes both ways (the
// RPC path) and an unknown role is no identity.
func TestMemberRole(t *testing.T) {
	dir, caC, caK := newCADir(t)
	n1, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"n1", RoleNode}), nil)
	if err != nil {
		t.Fatal(err)
	}
	m4, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"m4", RoleMember}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := m4.Identity(); got != (Identity{"m4", RoleMember}) {
		t.Fatalf("member reloader identity %+v", got)
	}
	s, c, err := handshake(n1.ServerConfig(), m4.ClientConfig())
	if err != nil || s != (Identity{"m4", RoleMember}) || c != (Identity{"n1", RoleNode}) {
		t.Fatalf("m4→n1: server saw %+v, client saw %+v, err %v", s, c, err)
	}
	if s, c, err := handshake(m4.ServerConfig(), n1.ClientConfig()); err != nil || s != (Identity{"n1", RoleNode}) || c != (Identity{"m4", RoleMember}) {
		t.Fatalf("n1→m4: server saw %+v, client saw %+v, err %v", s, c, err)
	}
	if _, _, err := Issue(caC, caK, Identity{"x", Role("voter")}, nil, time.Hour); err == nil {
		t.Error("Issue accepted an unknown role")
	}
	for _, r := range []Role{RoleNode, RoleMember, RoleOperator} {
		if !r.Valid() {
			t.Errorf("%q not valid", r)
		}
	}
	if Role("").Valid() || Role("Node").Valid() {
		t.Error("an unknown role is valid")
	}
}

// Overwritten files are served on the next handshake once the throttle
// passes; a damaged file keeps the old material and is reported.
func TestReloadRotation(t *testing.T) {
	dir, caC, caK := newCADir(t)
	f := issueTo(t, dir, caC, caK, Identity{"n1", RoleNode})
	now := time.Unix(1000, 0)
	r, err := NewReloader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return now }
	r.checked = now
	first := r.current().cert.Certificate[0]

	issueTo(t, dir, caC, caK, Identity{"n1", RoleNode}) // rotate
	if got := r.current().cert.Certificate[0]; string(got) != string(first) {
		t.Fatal("reloaded within the 1 s throttle")
	}
	now = now.Add(2 * time.Second)
	rotated := r.current().cert.Certificate[0]
	if string(rotated) == string(first) {
		t.Fatal("rotated certificate not picked up")
	}

	if err := os.WriteFile(f.Cert, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if got := r.current().cert.Certificate[0]; string(got) != string(rotated) {
		t.Fatal("a damaged file replaced the good certificate")
	}
	if r.LastError() == nil {
		t.Fatal("damaged file not reported")
	}
}

func TestNewReloaderErrors(t *testing.T) {
	dir, caC, caK := newCADir(t)
	f := issueTo(t, dir, caC, caK, Identity{"n1", RoleNode})
	odir, _, _ := newCADir(t)
	for name, bad := range map[string]Files{
		"missing CA":         {CA: filepath.Join(dir, "nope.pem"), Cert: f.Cert, Key: f.Key},
		"CA not PEM":         {CA: f.Key + ".x", Cert: f.Cert, Key: f.Key},
		"key of another":     {CA: f.CA, Cert: f.Cert, Key: f.CA},
		"cert of another CA": {CA: filepath.Join(odir, "ca.pem"), Cert: f.Cert, Key: f.Key},
	} {
		if name == "CA not PEM" {
			_ = os.WriteFile(bad.CA, []byte("garbage"), 0o600)
		}
		if _, err := NewReloader(bad, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzIdentityPEM(f *testing.F) {
	c, _, _ := NewCA("t", time.Hour)
	f.Add(c)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = tls.X509KeyPair(b, b)
		_, _ = PeerIdentity(tls.ConnectionState{})
	})
}

// A key pair without CA (the HTTP API's certificate) loads, is served by
// GetCertificate and is re-read when it changes; the CA-checked Reloader
// still refuses a missing CA.
func TestKeyPairReloader(t *testing.T) {
	dir, caC, caK := newCADir(t)
	f := issueTo(t, dir, caC, caK, Identity{"web", RoleNode})
	if _, err := NewReloader(Files{Cert: f.Cert, Key: f.Key}, nil); err == nil {
		t.Fatal("NewReloader without a CA file succeeded")
	}
	r, err := NewKeyPairReloader(f.Cert, f.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.checked = now
	c1, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another CA's certificate is just as good here: nothing is verified.
	_, caC2, caK2 := newCADir(t)
	issueTo(t, dir, caC2, caK2, Identity{"web", RoleNode})
	now = now.Add(2 * time.Second)
	c2, _ := r.GetCertificate(nil)
	if string(c2.Certificate[0]) == string(c1.Certificate[0]) {
		t.Fatal("rotated key pair not picked up")
	}
	if _, err := NewKeyPairReloader(f.Cert, filepath.Join(dir, "missing.pem"), nil); err == nil {
		t.Fatal("missing key file accepted")
	}
}
