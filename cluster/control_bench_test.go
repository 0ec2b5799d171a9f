package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkControlApply measures committed Apply round trips on three
// loopback-TCP nodes with bolt (fsync) stores: on the leader, forwarded from
// a follower, and forwarded with 64 concurrent writers.
func BenchmarkControlApply(b *testing.B) {
	h := newTCPHarness(b)
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	leader := h.waitLeader(30 * time.Second)
	var follower *testNode
	for _, n := range h.running() {
		if n != leader {
			follower = n
			break
		}
	}
	var seq atomic.Int64
	run := func(b *testing.B, n *testNode) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := n.g.Apply(ctx, fmt.Appendf(nil, "b%d", seq.Add(1))); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("leader", func(b *testing.B) {
		for b.Loop() {
			run(b, leader)
		}
	})
	b.Run("forwarded", func(b *testing.B) {
		for b.Loop() {
			run(b, follower)
		}
	})
	b.Run("forwarded-64", func(b *testing.B) {
		b.SetParallelism(64)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				run(b, follower)
			}
		})
	})
}
