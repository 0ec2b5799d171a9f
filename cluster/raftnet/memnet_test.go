package raftnet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// echo answers every RPC arriving at t until stop is closed.
func echo(t *MemTransport, stop <-chan struct{}) {
	for {
		select {
		case rpc := <-t.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		case <-stop:
			return
		}
	}
}

func TestRaftMemNetworkDelayCutHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork(1)
		a, b := n.Transport("10.0.0.1:1"), n.Transport("10.0.0.2:1")
		stop := make(chan struct{})
		defer close(stop)
		go echo(b, stop)

		n.SetLink("10.0.0.1:1", "10.0.0.2:1", Link{Delay: 30 * time.Millisecond})
		n.SetLink("10.0.0.2:1", "10.0.0.1:1", Link{Delay: 20 * time.Millisecond})
		start := time.Now()
		var resp raft.AppendEntriesResponse
		if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 50*time.Millisecond || resp.Term != 7 {
			t.Fatalf("round trip %v resp %+v, want 50ms term 7", d, resp)
		}

		// A cut link fails at once, never blocks.
		n.Cut("10.0.0.1:1", "10.0.0.2:1")
		start = time.Now()
		if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp); err == nil {
			t.Fatal("send over cut link succeeded")
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("send over cut link took %v", d)
		}
		// Asymmetric: the reverse direction is cut, the request arrives
		// but the answer is lost.
		n.Heal()
		n.Cut("10.0.0.2:1", "10.0.0.1:1")
		if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp); err == nil {
			t.Fatal("answer crossed a cut reverse link")
		}
		n.Heal()
		if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp); err != nil {
			t.Fatal(err)
		}
		// A closed peer fails at once.
		_ = b.Close()
		start = time.Now()
		if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp); err == nil || time.Since(start) > 50*time.Millisecond {
			t.Fatalf("send to closed peer: err %v after %v", err, time.Since(start))
		}
	})
}

func TestRaftMemNetworkUnresponsivePeerTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork(1)
		n.SetTimeout(200 * time.Millisecond)
		a, b := n.Transport("a:1"), n.Transport("b:1")
		start := time.Now()
		var resp raft.AppendEntriesResponse
		if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp); err == nil {
			t.Fatal("unresponsive peer answered")
		}
		if d := time.Since(start); d != 200*time.Millisecond {
			t.Fatalf("timed out after %v, want 200ms", d)
		}
	})
}

func TestRaftMemNetworkLossIsSeeded(t *testing.T) {
	run := func() []bool {
		var out []bool
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(42)
			n.SetDefaultLink(Link{Loss: 0.5})
			a, b := n.Transport("a:1"), n.Transport("b:1")
			stop := make(chan struct{})
			defer close(stop)
			go echo(b, stop)
			for range 64 {
				var resp raft.AppendEntriesResponse
				out = append(out, a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{}, &resp) == nil)
			}
		})
		return out
	}
	x, y := run(), run()
	ok := 0
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("seed 42: message %d differs between runs", i)
		}
		if x[i] {
			ok++
		}
	}
	if ok == 0 || ok == len(x) {
		t.Fatalf("seed 42: %d of %d delivered with 50%% loss each way", ok, len(x))
	}
}

func TestMemStreamLayerCutClosesStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork(1)
		a, b := n.StreamLayer("a:1"), n.StreamLayer("b:1")
		defer a.Close()
		defer b.Close()
		ctx := context.Background()
		c, err := a.Dial(ctx, "b:1")
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Accept()
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = s.Write([]byte("hi")) }()
		buf := make([]byte, 2)
		if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
			t.Fatalf("read %q %v", buf, err)
		}
		n.Cut("b:1", "a:1")
		if _, err := c.Read(buf); err == nil {
			t.Fatal("stream survived a cut")
		}
		if _, err := a.Dial(ctx, "b:1"); err == nil {
			t.Fatal("dial across a cut link succeeded")
		}
		if _, err := a.Dial(ctx, "nobody:1"); err == nil {
			t.Fatal("dial to unknown address succeeded")
		}
	})
}
