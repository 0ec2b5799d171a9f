package ring

import (
	"errors"
	"strings"
	"testing"
)

// FuzzNew feeds arbitrary configs and member lists (newline-separated) to
// New: it must never panic, never report ErrInternal, and every ring it
// returns must satisfy the invariants.
func FuzzNew(f *testing.F) {
	f.Add(1024, 1.25, 100, "a\nb\nc", 0.6)
	f.Add(10, 1.0, 20, "a\nb\nc", 0.6)          // Load 1, 3 ∤ 10
	f.Add(3, 1.25, 20, "a\nb\nc\nd", 0.6)       // more members than partitions
	f.Add(1, 1.25, 1, "a", 0.6)                 // RF 1
	f.Add(271, 1.25, 20, "a\na1\na12\nb9", 0.6) // issue #17 names
	f.Add(-4, -1.0, 0, "", 0.6)                 // nonsense
	f.Add(50, 1.1, 11, "x\n\ny", 0.6)           // empty name
	f.Add(64, 2.0, 3, "dup\ndup", 0.6)          // duplicate
	f.Fuzz(func(t *testing.T, partitions int, load float64, rf int, members string, minLoad float64) {
		// Keep each run cheap: the limits themselves are tested elsewhere.
		if partitions > 1<<14 || rf > 256 || len(members) > 4096 {
			t.Skip()
		}
		var ms []string
		if members != "" {
			ms = strings.Split(members, "\n")
		}
		cfg := Config{Partitions: partitions, Load: load, ReplicationFactor: rf, MinLoad: minLoad}
		r, err := New(cfg, ms)
		if err != nil {
			if r != nil {
				t.Fatalf("non-nil ring with error %v", err)
			}
			if errors.Is(err, ErrInternal) || errors.Is(err, ErrNoRoom) {
				t.Fatalf("library panic escaped validation: %v", err)
			}
			return
		}
		checkInvariants(t, r)
		if len(ms) > 1 {
			r2, err := New(cfg, ms[1:])
			if err != nil {
				return
			}
			for _, m := range Diff(r, r2) {
				if m.From == m.To {
					t.Fatalf("no-op move %+v", m)
				}
			}
		}
	})
}
