package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/rpc"
)

// BenchmarkStreamFanout emulates many members on the committed-state
// stream against 3 real voters (in-memory network): each member is the
// real subscriber loop (streamFollower, its own connection pool and
// replica), without gossip or a node around it. The leader commits at a
// steady rate; the benchmark reports, per voter, the Subscribe calls it
// answers and the bytes it sends, per member the bytes it receives, and
// the process's CPU (voters and members together).
//
//	TENURE_STREAM_MEMBERS=1000 TENURE_STREAM_RATE=20 go test ./cluster -run '^$' -bench StreamFanout -benchtime 1x
//
// docs/benchmarks.md ("Stream fan-out") has figures and what they predict
// for 5,000 members.
func BenchmarkStreamFanout(b *testing.B) {
	members := envInt("TENURE_STREAM_MEMBERS", 200)
	rate := envInt("TENURE_STREAM_RATE", 20) // commits per second
	window := time.Duration(envInt("TENURE_STREAM_SECONDS", 10)) * time.Second
	for range b.N {
		sh := newStreamHarness(b)
		sh.tune = func(c *ControlConfig) { c.StreamWait = DefaultStreamWait }
		for _, id := range []string{"n1", "n2", "n3"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		l := sh.waitLeader(30 * time.Second)
		var voters []ServerInfo
		for _, id := range []string{"n1", "n2", "n3"} {
			voters = append(voters, ServerInfo{ID: id, Addr: sh.nodes[id].addr, Voter: true})
		}
		closing := make(chan struct{})
		fsms := make([]*seqFSM, members)
		follows := make([]*streamFollower, members)
		done := make(chan struct{}, members)
		for i := range members {
			id := fmt.Sprintf("m%04d", i)
			f := &seqFSM{}
			g := &ControlGroup{
				cfg:          ControlConfig{NodeID: id, Voter: VoterNever, StreamWait: DefaultStreamWait, RPCTimeout: 5 * time.Second, MaxRPCMessage: rpc.DefaultMaxRPCMessage, StreamBatchBytes: DefaultStreamBatchBytes, StreamMaxSnapshot: DefaultStreamMaxSnapshot, ElectionTimeout: time.Second},
				log:          slog.New(slog.DiscardHandler),
				closing:      closing,
				leaderChange: make(chan struct{}),
				addr:         fmt.Sprintf("10.1.%d.%d:7000", i/250, i%250+1),
			}
			g.rec = newStreamFSM(f, f.appliedIndex, 0, 0)
			g.follow = newStreamFollower(g, sh.mem.StreamLayer(g.addr))
			g.follow.voters = voters
			fsms[i], follows[i] = f, g.follow
			go func() {
				g.follow.run()
				done <- struct{}{}
			}()
		}
		// Everyone caught up with the leader before the window.
		sh.applyN(l, "warm", 5)
		catchUp := func() {
			want := sh.fsms[l.id].appliedIndex()
			waitFor(b, 120*time.Second, "members caught up", func() bool {
				for _, f := range fsms {
					if f.appliedIndex() < want {
						return false
					}
				}
				return true
			})
		}
		catchUp()
		sent0 := map[string]uint64{}
		for _, id := range []string{"n1", "n2", "n3"} {
			sent0[id] = sh.nodes[id].g.streamStats.bytesSent.Load()
		}
		var recv0 uint64
		for _, f := range follows {
			recv0 += f.bytes.Load()
		}
		calls := func() (n uint64) {
			for _, id := range []string{"n1", "n2", "n3"} {
				n += sh.nodes[id].g.streamStats.calls.Load()
			}
			return n
		}
		calls0 := calls()
		cpu0 := processCPU()
		start := time.Now()
		var commits, sent atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), window)
		tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
		payload := string(make([]byte, 100))
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-tick.C:
				if rate == 0 {
					continue
				}
				n := sent.Add(1)
				go func() {
					if _, err := l.g.Apply(ctx, []byte(fmt.Sprintf("c%d%s", n, payload))); err == nil {
						commits.Add(1)
					}
				}()
			}
		}
		tick.Stop()
		cancel()
		secs := time.Since(start).Seconds()
		cpu := processCPU() - cpu0
		ncalls := calls() - calls0
		var recv uint64
		for _, f := range follows {
			recv += f.bytes.Load()
		}
		catchUp()
		var sentBytes uint64
		for _, id := range []string{"n1", "n2", "n3"} {
			sentBytes += sh.nodes[id].g.streamStats.bytesSent.Load() - sent0[id]
		}
		for i, f := range fsms {
			if _, h := f.state(); func() bool { _, lh := sh.fsms[l.id].state(); return h != lh }() {
				b.Fatalf("member %d's replica differs from the leader's", i)
			}
		}
		b.ReportMetric(float64(commits.Load())/secs, "commits/s")
		b.ReportMetric(float64(ncalls)/secs/3, "subscribe-calls/s/voter")
		b.ReportMetric(float64(sentBytes)/secs/3, "bytes-sent/s/voter")
		b.ReportMetric(float64(recv-recv0)/secs/float64(members), "bytes/s/member")
		b.ReportMetric(100*cpu.Seconds()/secs, "cpu-%-process")
		b.ReportMetric(float64(members), "members")
		close(closing)
		for range members {
			<-done
		}
		sh.closeAll()
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
