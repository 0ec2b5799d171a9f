package simulation

import "testing"

// BenchmarkSimSeed measures one default tier-1 run (12 s simulated, random
// faults, workload).
func BenchmarkSimSeed(b *testing.B) {
	var events uint64
	for i := 0; b.Loop(); i++ {
		res, err := Run(DefaultConfig(uint64(i + 1)))
		if err != nil {
			b.Fatal(err)
		}
		events += res.Events
	}
	b.ReportMetric(float64(events)/float64(b.N), "events/seed")
}

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool
