package certs

import (
	"crypto/tls"
	"net"
	"os"
	"testing"
	"time"
)

// dialOnce runs a handshake and one read over loopback (a TLS 1.3 client
// receives session tickets after the handshake, on its first read) and
// reports whether the client resumed a session.
func dialOnce(t *testing.T, server, client *tls.Config) (resumed bool, err error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, err := ln.Accept()
		if err != nil {
			return
		}
		defer a.Close()
		_ = a.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(a, server)
		if s.Handshake() == nil {
			_, _ = s.Write([]byte{1})
		}
	}()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(b, client)
	if err = c.Handshake(); err == nil {
		var one [1]byte
		_, err = c.Read(one[:])
	}
	resumed = c.ConnectionState().DidResume
	b.Close()
	<-done
	return resumed, err
}

// TestNoSessionResumption: a client that keeps session tickets does a full
// handshake every time, so a rotated CA refuses it at its next connection
// (with tickets, Go resumes without verifying the client certificate
// again, for up to 7 days).
func TestNoSessionResumption(t *testing.T) {
	dir, caC, caK := newCADir(t)
	n1, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"n1", RoleNode}), nil)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := NewReloader(issueTo(t, dir, caC, caK, Identity{"n2", RoleNode}), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	n1.now = func() time.Time { return now }
	sc := n1.ServerConfig() // one server config, as the stream layer holds
	cc := n2.ClientConfig()
	cc.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	cc.ServerName = "n1" // the session cache's key (each dial has a new port)
	for i := range 2 {
		resumed, err := dialOnce(t, sc, cc)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if resumed {
			t.Fatalf("connection %d resumed a session: the client certificate was not verified again", i)
		}
	}
	// Rotate n1 to a CA that did not sign n2 (a new certificate for n1
	// too: a CA its own certificate does not chain to is not loaded).
	newCA, newKey, err := NewCA("rotated", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issueTo(t, dir, newCA, newKey, Identity{"n1", RoleNode})
	if err := os.WriteFile(n1.files.CA, newCA, 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second) // past the reload throttle
	if _, err := dialOnce(t, sc, cc); err == nil {
		t.Fatal("a client of the old CA connected after the CA was rotated")
	}
}
