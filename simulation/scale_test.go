package simulation

import (
	"flag"
	"testing"
	"time"
)

var (
	flagScaleNodes  = flag.Int("sim.scale.nodes", 1000, "TestSimScale: nodes of the run (make sim: 10000)")
	flagScaleShards = flag.Int("sim.scale.shards", 0, "TestSimScale: shards (default 4 per node, at least 4096)")
	flagScaleSeed   = flag.Uint64("sim.scale.seed", 7, "TestSimScale: the seed")
)

// TestSimScale runs tier 1 (the real planner, FSM and agent core, one
// seeded RNG) at -sim.scale.nodes nodes with random faults and demands
// zero violations (safety throughout, liveness after the faults). It
// reports the wall time: `make test` runs 1,000 nodes, `make sim` 10,000.
func TestSimScale(t *testing.T) {
	n := *flagScaleNodes
	shards := *flagScaleShards
	if shards == 0 {
		shards = max(4096, 4*n)
	}
	cfg := DefaultConfig(*flagScaleSeed)
	cfg.Profile = "scale"
	cfg.Nodes = n
	cfg.Ownership.Ring.Partitions = shards
	start := time.Now()
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	t.Logf("sim scale: %d nodes, %d shards, seed %d: %v simulated, %d events, %d commits, %d faults in %v wall",
		n, shards, cfg.Seed, res.Simulated, res.Events, res.Commits, len(res.Faults), wall.Round(time.Millisecond))
	for _, v := range res.Violations {
		t.Errorf("%s", v)
	}
	if res.Failed() {
		t.Errorf("replay: go test ./simulation -run TestSimScale -sim.scale.nodes=%d -sim.scale.shards=%d -sim.scale.seed=%d -v", n, shards, cfg.Seed)
	}
}
