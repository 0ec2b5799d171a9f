package identity

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
)

// A connection that was open when its peer was revoked is refused and
// closed at its next read or write; until then it carries bytes.
func TestRevocableConnClosesAtNextUse(t *testing.T) {
	var revoked atomic.Bool
	var logged atomic.Int32
	r := &Revocation{
		Revoked: func(p Peer) error {
			if revoked.Load() && p.ID == "n2" {
				return ErrPeerRevoked
			}
			return nil
		},
		Log: func(net.Conn, error) { logged.Add(1) },
	}
	a, b := net.Pipe()
	defer b.Close()
	c := r.Wrap(a, Peer{ID: "n2", Role: RoleNode})
	go func() { _, _ = b.Write([]byte("x")); _, _ = b.Write([]byte("y")) }()
	var buf [1]byte
	if n, err := c.Read(buf[:]); n != 1 || err != nil {
		t.Fatalf("read before the revocation: %d, %v", n, err)
	}
	revoked.Store(true)
	if _, err := c.Read(buf[:]); !errors.Is(err, ErrPeerRevoked) {
		t.Fatalf("read after the revocation: %v, want ErrPeerRevoked", err)
	}
	if _, err := c.Write([]byte("z")); !errors.Is(err, ErrPeerRevoked) {
		t.Fatalf("write after the revocation: %v, want ErrPeerRevoked", err)
	}
	if _, err := a.Write([]byte("z")); err == nil {
		t.Fatal("the underlying connection is still open")
	}
	if logged.Load() == 0 {
		t.Fatal("the refusal was not logged")
	}
	// Another peer's connection is untouched.
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	go func() { _, _ = y.Write([]byte("x")) }()
	if _, err := r.Wrap(x, Peer{ID: "n3", Role: RoleNode}).Read(buf[:]); err != nil {
		t.Fatalf("n3's connection: %v", err)
	}
}
