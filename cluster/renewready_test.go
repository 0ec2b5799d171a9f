package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A renewal that reaches the leader before it established its term
// (ControlConfig.Renew answers ErrRenewNotReady) is held until RenewReady
// closes and judged again then, with a now read after the close, and acked
// after the confirm round; without RenewReady, or once its deadline passes,
// it fails as ErrNotLeader.
func TestRenewHeldUntilEstablished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		established := false
		ready := make(chan struct{})
		var judged []time.Time
		var readyAt time.Time
		asked := make(chan struct{}, 16)
		useReady := true
		h := newMemHarness(t, 15)
		h.cfg = func(c *ControlConfig) {
			c.BootstrapExpect, c.MaxVoters = 1, 1
			c.Renew = func(now time.Time, req RenewRequest) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				judged = append(judged, now)
				asked <- struct{}{}
				if !established {
					return nil, fmt.Errorf("%w: test", ErrRenewNotReady)
				}
				return []byte("rec:" + req.Node), nil
			}
			c.RenewReady = func() <-chan struct{} {
				mu.Lock()
				defer mu.Unlock()
				if !useReady {
					return nil
				}
				return ready
			}
		}
		h.start("n1")
		defer h.closeAll()
		l := h.waitLeader(10 * time.Second)

		// Held: the first judgement refuses, the renewal waits.
		type outcome struct {
			res RenewResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := l.g.Renew(ctx, RenewRequest{Node: "m1", Incarnation: 1, Liveness: 1})
			done <- outcome{res, err}
		}()
		<-asked
		synctest.Wait()
		select {
		case o := <-done:
			t.Fatalf("renewal answered before the term was established: %+v %v", o.res, o.err)
		default:
		}
		time.Sleep(300 * time.Millisecond) // the fake clock: the term takes 300 ms to establish
		mu.Lock()
		established, readyAt = true, time.Now()
		close(ready)
		mu.Unlock()
		o := <-done
		if o.err != nil || string(o.res.Record) != "rec:m1" || o.res.CommitIndex == 0 {
			t.Fatalf("held renewal: %+v %v, want acked", o.res, o.err)
		}
		mu.Lock()
		if len(judged) != 2 || judged[1].Before(readyAt) {
			t.Fatalf("judged at %v (ready at %v): want twice, the second after the term was established", judged, readyAt)
		}
		// Not established and the deadline passes: ErrNotLeader.
		established, ready, judged = false, make(chan struct{}), nil
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := l.g.Renew(ctx, RenewRequest{Node: "m1", Incarnation: 1, Liveness: 1}); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("renewal past its deadline = %v, want ErrNotLeader", err)
		}
		// Without RenewReady: refused at once.
		mu.Lock()
		useReady, judged = false, nil
		mu.Unlock()
		start := time.Now()
		if _, err := l.g.Renew(context.Background(), RenewRequest{Node: "m1", Incarnation: 1, Liveness: 1}); !errors.Is(err, ErrNotLeader) || time.Since(start) > 0 {
			t.Fatalf("renewal without RenewReady = %v after %v, want ErrNotLeader at once", err, time.Since(start))
		}
	})
}
