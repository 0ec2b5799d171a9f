package rpc

import (
	"net"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowService counts the requests it runs at once.
type slowService struct {
	running, peak atomic.Int32
	release       chan struct{}
}

func (s *slowService) Wait(_ int, reply *int) error {
	n := s.running.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-s.release
	s.running.Add(-1)
	*reply = 1
	return nil
}

// TestInflightRPCsBounded: one connection with 40 calls outstanding runs
// at most 4 at once on a codec bounded at 4, and all 40 are answered.
func TestInflightRPCsBounded(t *testing.T) {
	svc := &slowService{release: make(chan struct{})}
	srv := netrpc.NewServer()
	if err := srv.RegisterName("Slow", svc); err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	go srv.ServeCodec(newGobServerCodec(b, 4))
	cl := netrpc.NewClient(a)
	defer cl.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r int
			errs <- cl.Call("Slow.Wait", 0, &r)
		}()
	}
	waitFor(t, 10*time.Second, "4 requests running", func() bool { return svc.running.Load() == 4 })
	close(svc.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := svc.peak.Load(); p != 4 {
		t.Fatalf("peak %d requests at once on one connection, want 4", p)
	}
}

// TestPendingLimiter: the caps per port and per source, loopback exempt
// from the per-source one.
func TestPendingLimiter(t *testing.T) {
	l := newPendingLimiter(3, 2)
	a := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}
	b := &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 1}
	lo := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}
	r1, _ := l.acquire(a)
	r2, _ := l.acquire(a)
	if _, why := l.acquire(a); why != "pending_per_source" {
		t.Fatalf("third from one source: %q, want pending_per_source", why)
	}
	r3, why := l.acquire(b)
	if why != "" {
		t.Fatalf("another source: %q", why)
	}
	if _, why = l.acquire(b); why != "pending_per_port" {
		t.Fatalf("fourth on the port: %q, want pending_per_port", why)
	}
	r1()
	r1() // twice is once
	r4, why := l.acquire(lo)
	if why != "" {
		t.Fatalf("after a release: %q", why)
	}
	r2()
	r3()
	r4()
	for range 3 {
		if _, why := l.acquire(lo); why != "" {
			t.Fatalf("loopback within the port's cap: %q", why)
		}
	}
}

// waitFor polls cond until it holds or timeout passes (then fails t).
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
