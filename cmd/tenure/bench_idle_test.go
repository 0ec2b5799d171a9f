package main

import (
	"strings"
	"testing"
)

func TestBenchIdleBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "nope"},
		{[]string{"-profile", "turbo"}, `profile "turbo"`},
		{[]string{"-nodes", "2"}, "-nodes 2"},
		{[]string{"-window", "10ms"}, "-window 10ms"},
		{[]string{"-partitions", "3"}, "-partitions 3"},
		{[]string{"extra"}, `"extra"`},
	} {
		_, stderr, err := run(t, append([]string{"bench", "idle"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("bench idle %q: err=%v stderr=%q, want mention of %s", tc.args, err, stderr, tc.want)
		}
	}
}

func TestParseSummaryQuantiles(t *testing.T) {
	in := `# HELP tenure_lease_renew tenure_lease_renew
# TYPE tenure_lease_renew summary
tenure_lease_renew{quantile="0.5"} 0.42
tenure_lease_renew{quantile="0.9"} NaN
tenure_lease_renew{quantile="0.99"} 1.5
tenure_lease_renew_sum 12
tenure_lease_renewals_total 3
`
	q, err := parseSummaryQuantiles(strings.NewReader(in), "tenure_lease_renew")
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 2 || q["0.5"] != 0.42 || q["0.99"] != 1.5 {
		t.Fatalf("quantiles = %v", q)
	}
}
