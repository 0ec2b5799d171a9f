package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/rpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/certs"
	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// BenchmarkWordsIdlePolls estimates what members' idle Control.Words long
// polls (cluster version 6) cost the leader: three voters over loopback
// TCP with mutual TLS; each of 100 members (its own node certificate, its
// own connection) keeps one ask open and asks again as soon as it is
// answered; the leader holds every ask for hold and answers it empty, as
// node/ does with nothing to relay (hold 125 ms = the default profile's
// RenewEvery/2) — without a confirm round (ControlConfig.NoWords), or
// with one (confirm-empty=true, as before NoWords). One op is one answered ask.
// cpu-us/ask is the process's CPU per answered ask (the three voters and
// the askers alike, less the idle cluster's: an upper bound of the
// leader's share); cpu-pct is that CPU over the wall time, in % of one
// core: what 100 idle members' polls add at that hold.
func BenchmarkWordsIdlePolls(b *testing.B) {
	const members = 100
	for _, bc := range []struct {
		hold    time.Duration
		confirm bool
	}{{125 * time.Millisecond, false}, {125 * time.Millisecond, true}, {25 * time.Millisecond, false}} {
		hold := bc.hold
		// NoWords set: an empty answer skips the confirm round (as node/
		// sets it); confirm: the round runs for every answer (before).
		noWords := []byte("[]")
		if bc.confirm {
			noWords = nil
		}
		b.Run(fmt.Sprintf("members=%d/hold=%v/confirm-empty=%v", members, hold, bc.confirm), func(b *testing.B) {
			p := newTestPKI(b)
			h := newSecureHarness(b, p)
			secure := h.cfg
			h.cfg = func(c *ControlConfig) {
				secure(c)
				c.NoWords = noWords
				c.Words = func(ctx context.Context, node string) ([]byte, error) {
					t := time.NewTimer(hold)
					defer t.Stop()
					select {
					case <-t.C:
					case <-ctx.Done():
					}
					return []byte("[]"), nil
				}
			}
			for i := 1; i <= 3; i++ {
				h.start(fmt.Sprintf("n%d", i))
			}
			defer h.closeAll()
			h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
			l := h.waitLeader(30 * time.Second)
			clients := make([]*rpc.Client, members)
			for i := range clients {
				id := fmt.Sprintf("m%03d", i)
				cfg := p.reloader(certs.Identity{Name: id, Role: certs.RoleNode}).ClientConfig()
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.addr, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write([]byte{protoRPC}); err != nil {
					b.Fatal(err)
				}
				clients[i] = rpc.NewClient(c)
				defer clients[i].Close()
			}
			// The idle cluster's CPU, to subtract.
			c0, t0 := processCPU(), time.Now()
			time.Sleep(time.Second)
			idlePerSec := float64(processCPU()-c0) / time.Since(t0).Seconds()

			var answered atomic.Int64
			var failed atomic.Int64
			var firstErr atomic.Value
			target := int64(b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			c0, t0 = processCPU(), time.Now()
			for i, cl := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// node/'s ask: 2·hold + RenewEvery (askWords).
					args := wire.WordsArgs{Node: fmt.Sprintf("m%03d", i), Timeout: 2*hold + 250*time.Millisecond}
					for answered.Load() < target {
						var reply wire.WordsReply
						if err := cl.Call("Control.Words", &args, &reply); err != nil || reply.Code != wire.CodeOK {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, fmt.Sprintf("%v %d %s", err, reply.Code, reply.Msg))
							return
						}
						answered.Add(1)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			wall := time.Since(t0)
			cpu := float64(processCPU()-c0) - idlePerSec*wall.Seconds()
			n := answered.Load()
			if failed.Load() > 0 || n == 0 {
				b.Fatalf("%d asks failed (%v), %d answered", failed.Load(), firstErr.Load(), n)
			}
			b.ReportMetric(float64(n)/wall.Seconds(), "asks/s")
			b.ReportMetric(cpu/float64(n)/1e3, "cpu-us/ask")
			b.ReportMetric(100*cpu/float64(wall.Nanoseconds()), "cpu-pct")
		})
	}
}
