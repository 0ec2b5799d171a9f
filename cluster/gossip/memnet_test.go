package gossip

import (
	"io"
	"testing"
	"testing/synctest"
	"time"
)

func mustTransport(t *testing.T, n *MemNetwork, addr string) *MemTransport {
	t.Helper()
	tr, err := n.NewTransport(addr)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// received drains what arrived at tr without blocking.
func received(tr *MemTransport) []string {
	var out []string
	for {
		select {
		case p := <-tr.PacketCh():
			out = append(out, p.From.String()+":"+string(p.Buf))
		default:
			return out
		}
	}
}

func TestMemNetworkPackets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork(1)
		a := mustTransport(t, n, "10.0.0.1:7946")
		b := mustTransport(t, n, "10.0.0.2:7946")
		c := mustTransport(t, n, "10.0.0.3:7946")

		send := func(from *MemTransport, to *MemTransport, msg string) {
			t.Helper()
			if _, err := from.WriteTo([]byte(msg), to.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		expect := func(tr *MemTransport, want ...string) {
			t.Helper()
			got := received(tr)
			if len(got) != len(want) {
				t.Fatalf("%s received %q, want %q", tr.Addr(), got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s received %q, want %q", tr.Addr(), got, want)
				}
			}
		}

		send(a, b, "hello")
		expect(b, "10.0.0.1:7946:hello")

		n.Partition([]string{a.Addr()}, []string{b.Addr(), c.Addr()})
		send(a, b, "lost")
		send(b, c, "same side")
		expect(b)
		expect(c, "10.0.0.2:7946:same side")

		n.Heal()
		n.Cut(a.Addr(), b.Addr())
		send(a, b, "cut")
		send(b, a, "reverse works")
		expect(b)
		expect(a, "10.0.0.2:7946:reverse works")
		n.Heal()

		n.SetLink(a.Addr(), c.Addr(), 30*time.Millisecond, 0)
		send(a, c, "late")
		expect(c)
		time.Sleep(31 * time.Millisecond)
		expect(c, "10.0.0.1:7946:late")

		// A crash while a packet is in flight drops it.
		send(a, c, "never")
		n.Close(c.Addr())
		time.Sleep(time.Second)
		expect(c)
		if _, err := c.WriteTo([]byte("x"), a.Addr()); err == nil {
			t.Fatalf("a crashed transport can still send")
		}
		// The address can be reused after a crash.
		c2 := mustTransport(t, n, "10.0.0.3:7946")
		send(a, c2, "again")
		time.Sleep(31 * time.Millisecond)
		expect(c2, "10.0.0.1:7946:again")
		if _, err := n.NewTransport(c2.Addr()); err == nil {
			t.Fatalf("address in use was accepted twice")
		}
		if _, err := n.NewTransport("node-1:7946"); err == nil {
			t.Fatalf("a host name was accepted")
		}
	})
}

func TestMemNetworkLossIsSeeded(t *testing.T) {
	run := func(seed int64) (got int) {
		n := NewMemNetwork(seed)
		a := mustTransport(t, n, "10.0.0.1:1")
		b := mustTransport(t, n, "10.0.0.2:1")
		n.SetLink(a.Addr(), b.Addr(), 0, 0.5)
		for range 1000 {
			if _, err := a.WriteTo([]byte("p"), b.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		return len(received(b))
	}
	first := run(42)
	if first < 400 || first > 600 {
		t.Fatalf("seed 42: %d of 1000 delivered at 50%% loss", first)
	}
	if again := run(42); again != first {
		t.Fatalf("seed 42 delivered %d then %d", first, again)
	}
}

func TestMemNetworkStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork(1)
		a := mustTransport(t, n, "10.0.0.1:7946")
		b := mustTransport(t, n, "10.0.0.2:7946")

		conn, err := a.DialTimeout(b.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		server := <-b.StreamCh()
		if server.RemoteAddr().String() != a.Addr() || conn.RemoteAddr().String() != b.Addr() {
			t.Fatalf("addresses %s / %s", server.RemoteAddr(), conn.RemoteAddr())
		}
		go func() { _, _ = conn.Write([]byte("ping")) }()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("read %q, %v", buf, err)
		}

		// A partition breaks the open stream and refuses new ones at once.
		n.Partition([]string{a.Addr()}, []string{b.Addr()})
		if _, err := server.Read(buf); err == nil {
			t.Fatalf("stream survived the partition")
		}
		start := time.Now()
		if _, err := a.DialTimeout(b.Addr(), time.Second); err == nil {
			t.Fatalf("dial across a partition succeeded")
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("dial to an unreachable peer blocked for %v", waited)
		}
		n.Heal()

		// A crash closes the crashed node's streams.
		conn, err = a.DialTimeout(b.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		server = <-b.StreamCh()
		n.Close(a.Addr())
		if _, err := server.Read(buf); err == nil {
			t.Fatalf("stream survived the crash")
		}
		_ = conn.Close()
		if _, err := b.DialTimeout(a.Addr(), time.Second); err == nil {
			t.Fatalf("dial to a crashed node succeeded")
		}

		// Link delay applies to dialing; a delay over the timeout fails.
		c := mustTransport(t, n, "10.0.0.3:7946")
		n.SetLink(b.Addr(), c.Addr(), 2*time.Second, 0)
		if _, err := b.DialTimeout(c.Addr(), time.Second); err == nil {
			t.Fatalf("dial slower than its timeout succeeded")
		}
		if st := n.Stats(); st.Dials != 2 || st.DialFails < 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}
