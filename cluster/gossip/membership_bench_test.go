package gossip

import (
	"testing"
	"time"
)

// BenchmarkCrashDetection measures, on loopback UDP/TCP, how long 4 peers
// take to declare a crashed fifth node dead, per profile. Run with
// -benchtime=3x; it reports detect-ms (the slowest peer).
func BenchmarkCrashDetection(b *testing.B) {
	for _, profile := range []func() Config{DefaultLANConfig, DefaultLocalConfig} {
		name := profile().Profile
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				e := realEnv(b)
				e.timeout = time.Minute
				e.profile = func() Config {
					c := profile()
					c.BindAddr, c.BindPort = "127.0.0.1", 0
					return c
				}
				first := e.start(b, "n1", "tenure", 1)
				nodes := []*Membership{first}
				for _, id := range []string{"n2", "n3", "n4", "n5"} {
					nodes = append(nodes, e.start(b, id, "tenure", 1, first.Local().Addr))
				}
				for _, n := range nodes {
					waitUntil(b, e.timeout, "5 alive", func() bool { return aliveIDs(n) == "n1,n2,n3,n4,n5" })
				}
				b.StartTimer()
				start := time.Now()
				e.crash(nodes[4])
				waitUntil(b, e.timeout, "n5 dead", sees(nodes[:4], "n5", StateDead, ""))
				total += time.Since(start)
				b.StopTimer()
				for _, n := range nodes {
					_ = n.Shutdown()
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "detect-ms")
		})
	}
}
