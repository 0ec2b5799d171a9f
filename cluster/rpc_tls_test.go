package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"
)

// testTLS returns server and client TLS configs sharing one self-signed
// certificate for 127.0.0.1.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tenure-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	return server, client
}

// Raft and the control RPC both run over the TLS stream layer (mutual TLS),
// and a plaintext peer is refused.
func TestControlOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	srvTLS, cliTLS := testTLS(t)
	h := newTCPHarness(t)
	h.cfg = func(c *ControlConfig) {
		inner, err := NewTCPStreamLayer("127.0.0.1:0", "")
		if err != nil {
			t.Fatal(err)
		}
		c.StreamLayer = NewTLSStreamLayer(inner, srvTLS, cliTLS)
	}
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
	var want []string
	for i, n := range h.running() {
		cmd := fmt.Sprintf("tls%d", i)
		h.apply(n, cmd, 30*time.Second)
		want = append(want, cmd)
	}
	h.waitApplied(30*time.Second, want)

	// A plaintext RPC client gets nowhere and the node keeps working.
	c, err := net.DialTimeout("tcp", h.nodes["n1"].addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte{protoRPC, 1, 2, 3})
	_ = c.Close()
	h.apply(h.nodes["n1"], "after-plaintext", 30*time.Second)
}
