package bench

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestRenewHistogramQuantiles(t *testing.T) {
	read := func(counts ...int) map[float64]float64 {
		t.Helper()
		in := fmt.Sprintf(`# HELP tenure_lease_renew_duration_seconds x
# TYPE tenure_lease_renew_duration_seconds histogram
tenure_lease_renew_duration_seconds_bucket{le="0.001"} %d
tenure_lease_renew_duration_seconds_bucket{le="0.002"} %d
tenure_lease_renew_duration_seconds_bucket{le="0.004"} %d
tenure_lease_renew_duration_seconds_bucket{le="+Inf"} %d
tenure_lease_renew_duration_seconds_sum 1
tenure_lease_renew_duration_seconds_count %d
`, counts[0], counts[1], counts[2], counts[3], counts[3])
		h, err := parseHistogramBuckets(strings.NewReader(in), "tenure_lease_renew_duration_seconds")
		if err != nil || len(h) != 4 {
			t.Fatalf("buckets %v, %v", h, err)
		}
		return h
	}
	before, after := read(10, 10, 10, 10), read(10, 60, 110, 110)
	// 100 observations in the window: 50 in (1, 2] ms, 50 in (2, 4] ms.
	if q, ok := histogramQuantile(0.5, before, after); !ok || math.Abs(q-0.002) > 1e-12 {
		t.Errorf("p50 = %v %v, want 0.002", q, ok)
	}
	if q, ok := histogramQuantile(0.99, before, after); !ok || math.Abs(q-0.00396) > 1e-9 {
		t.Errorf("p99 = %v %v, want 0.00396", q, ok)
	}
	if _, ok := histogramQuantile(0.5, after, after); ok {
		t.Error("a quantile of no observations")
	}
	if q, ok := histogramQuantile(0.99, before, read(10, 10, 10, 11)); !ok || q != 0.004 {
		t.Errorf("+Inf bucket: %v %v, want the largest finite bound", q, ok)
	}
}
