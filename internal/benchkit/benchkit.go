// Package benchkit is what tenure's own benchmarks (cmd/tenure/internal/bench)
// and the etcd peer benchmark (bench/peers) share: the head of the failover
// summary both print, so the two can be divided line for line, the quantile
// they report, loopback ports and a scratch directory. bench/peers is a module
// of its own (so that tenure never depends on etcd) and requires this one
// through a replace directive; this package imports only the standard
// library.
package benchkit

import (
	"math"
	"net"
	"os"
)

// FailoverSummary is the head of the JSON line `tenure bench failover
// --json` and bench/peers print: the same eight fields, in this order,
// first in both (embed it; encoding/json flattens it).
type FailoverSummary struct {
	Mode     string  `json:"mode"`
	Profile  string  `json:"profile"`
	Runs     int     `json:"runs"`
	MinMs    float64 `json:"min_ms"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	Overlaps int     `json:"overlaps"`
}

// NearestRank is the nearest-rank quantile q (0..1) of sorted samples, 0 if
// there are none.
func NearestRank(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// FreeLoopbackAddrs reserves n loopback ports by binding them all, then
// releasing them, and returns their host:port addresses (distinct; another
// process may still take one before the caller binds it).
func FreeLoopbackAddrs(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// WorkDir returns dir when it is set (cleanup does nothing: the caller's
// directory is kept), else a new temporary directory named after prefix
// that cleanup removes.
func WorkDir(dir, prefix string) (path string, cleanup func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}
