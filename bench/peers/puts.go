package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/benchkit"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// runPuts measures etcd Put throughput with n concurrent writers on one
// client, the etcd side of `tenure bench ledger`.
func runPuts(ctx context.Context, o options, cli *clientv3.Client, stdout io.Writer) error {
	profile := "etcd"
	if o.tuned {
		profile += "-tuned"
	}
	if !o.json {
		fmt.Fprintf(stdout, "%s: 3 members, loopback, fsync, %v per step, 64-byte values\n", profile, o.duration)
		fmt.Fprintf(stdout, "%10s %12s %10s %10s %8s\n", "proposers", "puts/s", "p50_ms", "p99_ms", "failed")
	}
	value := string(make([]byte, 64))
	for _, n := range o.proposers {
		var done atomic.Int64
		lat := make([][]float64, n)
		cctx, cancel := context.WithTimeout(ctx, o.duration)
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range n {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; cctx.Err() == nil; i++ {
					t0 := time.Now()
					_, err := cli.Put(cctx, fmt.Sprintf("/tenure-bench/puts/%d/%d", w, i%1000), value)
					if err != nil {
						if cctx.Err() == nil {
							failed.Add(1) // e.g. "etcdserver: request timed out" under overload
							continue
						}
						return
					}
					lat[w] = append(lat[w], float64(time.Since(t0).Microseconds())/1000)
					done.Add(1)
				}
			}(w)
		}
		wg.Wait()
		cancel()
		secs := time.Since(start).Seconds()
		all := slices.Concat(lat...)
		slices.Sort(all)
		row := putsRow{Mode: "puts", Profile: profile, Proposers: n, Puts: done.Load(), Seconds: secs,
			PutsPerSec: float64(done.Load()) / secs, P50Ms: benchkit.NearestRank(all, 0.5), P99Ms: benchkit.NearestRank(all, 0.99), Failed: failed.Load()}
		if o.json {
			b, err := json.Marshal(row)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, string(b))
		} else {
			fmt.Fprintf(stdout, "%10d %12.0f %10.2f %10.2f %8d\n", row.Proposers, row.PutsPerSec, row.P50Ms, row.P99Ms, row.Failed)
		}
	}
	return nil
}
