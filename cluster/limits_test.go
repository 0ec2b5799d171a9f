package cluster

import (
	"net"
	"net/rpc"
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
	srv := rpc.NewServer()
	if err := srv.RegisterName("Slow", svc); err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	go srv.ServeCodec(newGobServerCodec(b, 4))
	cl := rpc.NewClient(a)
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
