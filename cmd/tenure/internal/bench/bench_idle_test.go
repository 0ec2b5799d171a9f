package bench

import (
	"strings"
	"testing"
)

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
