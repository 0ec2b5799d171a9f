package cluster

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/rpc"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/gossip"
	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// newSoloGroup starts a single-voter control group on loopback TCP.
func newSoloGroup(t testing.TB) *ControlGroup {
	t.Helper()
	cfg := TestControlConfig()
	cfg.NodeID = "solo"
	cfg.BindAddr = "127.0.0.1:0"
	cfg.BootstrapExpect, cfg.MaxVoters = 1, 1
	cfg.FSM = &testFSM{}
	store := raft.NewInmemStore()
	cfg.LogStore, cfg.StableStore, cfg.SnapshotStore = store, store, raft.NewInmemSnapshotStore()
	cfg.Logger = testLogger()
	fg := newFakeGossip()
	g, err := NewControlGroup(cfg, fg)
	if err != nil {
		t.Fatal(err)
	}
	fg.set(Member{Meta: Meta{ID: "solo", RaftAddr: g.Addr()}, State: StateAlive}, gossip.EventJoin)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	waitFor(t, 30*time.Second, "solo leader", func() bool { return g.established.Load() != 0 })
	return g
}

func statusOK(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{protoRPC}); err != nil {
		t.Fatal(err)
	}
	client := rpc.NewClient(c)
	var st wire.StatusReply
	if err := client.Call("Control.Status", &wire.StatusArgs{}, &st); err != nil {
		t.Fatalf("status after garbage: %v", err)
	}
	if st.ID != "solo" || !st.HasState {
		t.Fatalf("status = %+v", st)
	}
}

// Garbage on the wire (unknown protocol byte, junk after the RPC byte, junk
// after the Raft byte, a truncated gob message) never takes the server down.
func TestRPCMalformedInput(t *testing.T) {
	g := newSoloGroup(t)
	inputs := [][]byte{
		{0xff, 1, 2, 3},
		{},
		append([]byte{protoRPC}, bytes.Repeat([]byte{0xde, 0xad}, 1000)...),
		{protoRPC, 0x7f, 0xff, 0xff, 0xff, 0xff},
		append([]byte{protoRaft}, bytes.Repeat([]byte{0x42}, 100)...),
	}
	for _, in := range inputs {
		c, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(in)
		_ = c.Close()
	}
	statusOK(t, g.Addr())
	// Well-formed calls with bad arguments are answered, not crashed on.
	c, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte{protoRPC})
	client := rpc.NewClient(c)
	var rr wire.RemoveReply
	if err := client.Call("Control.Remove", &wire.RemoveArgs{ID: "bad id\x00"}, &rr); err != nil || rr.Code != wire.CodeBadRequest {
		t.Fatalf("remove bad id: %v %+v", err, rr)
	}
	if err := client.Call("Control.Remove", &wire.RemoveArgs{ID: "nobody"}, &rr); err != nil || rr.Code != wire.CodeUnknownServer {
		t.Fatalf("remove unknown: %v %+v", err, rr)
	}
	var ar wire.ApplyReply
	if err := client.Call("Control.Apply", &wire.ApplyArgs{Cmd: []byte("x"), Timeout: -time.Hour}, &ar); err != nil || ar.Code != wire.CodeOK || string(ar.Response) != "ok:x" {
		t.Fatalf("apply: %v %+v", err, ar)
	}
	if err := client.Call("Control.Nope", &wire.StatusArgs{}, &ar); err == nil {
		t.Fatal("unknown method accepted")
	}
	statusOK(t, g.Addr())
}

// FuzzRPCServer feeds arbitrary bytes to the control RPC server.
func FuzzRPCServer(f *testing.F) {
	f.Add([]byte{0x00})
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Add([]byte("\x0f\xff\x81\x03\x01\x01\x07Request"))
	g := newSoloGroup(f)
	srv := rpc.NewServer()
	if err := srv.RegisterName("Control", &controlRPC{g: g}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(b)
		}()
		go func() { _, _ = io.Copy(io.Discard, a) }()
		_ = a.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = a.Write(in)
		_ = a.Close()
		<-done
	})
}
