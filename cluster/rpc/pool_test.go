package rpc

import (
	"context"
	"errors"
	"net"
	netrpc "net/rpc"
	"testing"
	"time"
)

// pipeLayer is a StreamLayer whose Dial hands one end of a net.Pipe to the
// pool and serves srv on the other (after the pool's protocol byte).
type pipeLayer struct {
	net.Listener
	srv *netrpc.Server
}

func (l pipeLayer) Dial(context.Context, string) (net.Conn, error) {
	a, b := net.Pipe()
	go func() {
		var proto [1]byte
		if _, err := b.Read(proto[:]); err != nil || proto[0] != ProtoRPC {
			_ = b.Close()
			return
		}
		l.srv.ServeCodec(newGobServerCodec(b, 4))
	}()
	return a, nil
}

type LateReply struct{ V int }

type lateService struct{ release chan struct{} }

func (s *lateService) Late(_ int, reply *LateReply) error {
	<-s.release
	reply.V = 1
	return nil
}

func (s *lateService) Now(_ int, reply *LateReply) error {
	reply.V = 2
	return nil
}

// An answer that arrives after the caller stopped waiting is not written
// into the caller's reply, which the caller owns again once Call returned
// (the race detector saw net/rpc decode a late Control.Status answer while
// statusOf read it).
func TestPoolLateAnswerLeavesReplyAlone(t *testing.T) {
	svc := &lateService{release: make(chan struct{})}
	srv := netrpc.NewServer()
	if err := srv.RegisterName("S", svc); err != nil {
		t.Fatal(err)
	}
	p := NewPool(pipeLayer{srv: srv}, 1<<20)
	defer p.Close()
	var r LateReply
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Call(ctx, "peer", "S.Late", 0, &r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v, want the deadline", err)
	}
	r.V = 7 // the caller's again
	close(svc.release)
	// Answers on one connection are read in order: once this one is in,
	// the late one was decoded too.
	var now LateReply
	if err := p.Call(context.Background(), "peer", "S.Now", 0, &now); err != nil || now.V != 2 {
		t.Fatalf("second call: %v, reply %+v", err, now)
	}
	if r.V != 7 {
		t.Fatalf("the late answer was written into the caller's reply: V = %d, want 7", r.V)
	}
}
