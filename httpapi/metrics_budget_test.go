package httpapi

import (
	"testing"
	"time"
)

func TestTableBudget(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{0, 0},
		{-time.Millisecond, 0},
		{time.Millisecond, 19 * time.Millisecond},
		{50 * time.Millisecond, 950 * time.Millisecond},
	} {
		if got := tableBudget(c.took); got != c.want {
			t.Errorf("tableBudget(%v) = %v, want %v", c.took, got, c.want)
		}
		// The reads take at most 5 % of the time.
		if c.took > 0 && float64(c.took)/float64(c.took+tableBudget(c.took)) > 0.05+1e-9 {
			t.Errorf("tableBudget(%v): reads above 5 %% of the time", c.took)
		}
	}
}
