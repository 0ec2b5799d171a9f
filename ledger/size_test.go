package ledger

import "testing"

// TestEncodedSizes pins the sizes docs/ledger.md quotes.
func TestEncodedSizes(t *testing.T) {
	now := int64(1_763_780_000_000_000_000) // 2025-11 in unix ns
	for _, tc := range []struct {
		c   Command
		max int
	}{
		{Heartbeat{Node: "node-1", Incarnation: 3, Liveness: 2, Now: now}, 20},
		{JobStart{Shard: 17, Epoch: 4, Owner: "node-1", Job: 123456, Attempt: 1, Timeout: 30e9, Now: now}, 32},
		{JobComplete{Shard: 17, Epoch: 4, Job: 123456, Attempt: 1, Now: now}, 20},
	} {
		if n := len(MustEncode(tc.c)); n > tc.max {
			t.Errorf("%T encodes to %d bytes, docs say at most %d", tc.c, n, tc.max)
		}
	}
}
