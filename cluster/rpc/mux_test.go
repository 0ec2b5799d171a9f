package rpc

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/identity"
)

type dialStream struct {
	StreamLayer
	server chan net.Conn
}

func (d *dialStream) Dial(context.Context, string) (net.Conn, error) {
	a, b := net.Pipe()
	d.server <- b
	return a, nil
}

// A Raft dial goes only to a server that proved a node certificate: a
// member's (or one with no role) is dropped before one Raft byte is sent.
func TestRaftDialNeedsNodeServer(t *testing.T) {
	for _, tc := range []struct {
		role identity.Role
		ok   bool
	}{{identity.RoleNode, true}, {identity.RoleMember, false}, {identity.RoleOperator, false}, {identity.RoleNone, false}} {
		ds := &dialStream{server: make(chan net.Conn, 1)}
		r := &raftStream{stream: &checkedDialer{StreamLayer: ds, check: func(context.Context, string, net.Conn) (identity.Peer, error) {
			return identity.Peer{ID: "x", Role: tc.role}, nil
		}}}
		got := make(chan []byte, 1)
		go func() {
			srv := <-ds.server
			defer srv.Close()
			b := make([]byte, 1)
			n, _ := srv.Read(b)
			got <- b[:n]
		}()
		c, err := r.Dial("127.0.0.1:1", 5*time.Second)
		if (err == nil) != tc.ok {
			t.Errorf("%v server: Dial err = %v, want ok %v", tc.role, err, tc.ok)
		}
		if c != nil {
			_ = c.Close()
		}
		if b := <-got; tc.ok != bytes.Equal(b, []byte{ProtoRaft}) {
			t.Errorf("%v server: it read %q", tc.role, b)
		}
	}
}
