package ring

import (
	"fmt"
	"testing"
)

var (
	sinkShard uint32
	sinkOwner string
)

func BenchmarkShardFor(b *testing.B) {
	key := []byte("tenant-000042")
	b.ReportAllocs()
	for b.Loop() {
		sinkShard = ShardFor(DefaultPartitions, key)
	}
}

func BenchmarkOwner(b *testing.B) {
	r, err := New(DefaultConfig(), names(10))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var s uint32
	for b.Loop() {
		sinkOwner = r.Owner(s & (DefaultPartitions - 1))
		s++
	}
}

func BenchmarkOwnerOfKey(b *testing.B) {
	r, err := New(DefaultConfig(), names(10))
	if err != nil {
		b.Fatal(err)
	}
	key := []byte("tenant-000042")
	b.ReportAllocs()
	for b.Loop() {
		sinkOwner = r.OwnerOfKey(key)
	}
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		for _, pass := range []bool{true, false} {
			b.Run(fmt.Sprintf("P=1024/N=%d/minpass=%v", n, pass), func(b *testing.B) {
				cfg := DefaultConfig()
				if !pass {
					cfg.MinLoad = 0
				}
				ms := names(n)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := New(cfg, ms); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
