package simulation

import (
	"flag"
	"fmt"
	"testing"
	"time"
)

var (
	flagScaleNodes  = flag.Int("sim.scale.nodes", 1000, "TestSimScale: nodes of the run (make sim: SIMSCALE)")
	flagScaleShards = flag.Int("sim.scale.shards", 0, "TestSimScale: shards (default 2 per node, at least 1024)")
	flagScaleSeed   = flag.Uint64("sim.scale.seed", 7, "TestSimScale: the seed")
)

func scaleFlagSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "sim.scale.nodes" })
	return set
}

// TestSimScale runs tier 1 (the real planner, FSM and agent core, one
// seeded RNG) at -sim.scale.nodes nodes with random faults and demands
// zero violations (safety throughout, liveness after the faults). It
// reports the wall time: `make test` runs 1,000 nodes (200 under the race
// detector, 50 under -short), `make sim` SIMSCALE. Cost grows with the
// square of the nodes: every node's agent core observes every node's
// heartbeats (docs/simulation.md, "Scale").
func TestSimScale(t *testing.T) {
	n := *flagScaleNodes
	if raceEnabled && !scaleFlagSet() {
		n = 200 // the race detector makes the run ~5-10x slower; CI budget
	}
	if testing.Short() && !scaleFlagSet() {
		n = 50
	}
	shards := *flagScaleShards
	if shards == 0 {
		shards = max(1024, 2*n)
	}
	cfg := ScaleConfig(*flagScaleSeed, n, shards)
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

// TestSharedReplicasSameRun checks that Config.SharedReplicas changes only
// the cost: the same seeds give the same events, commits, trace hash and
// outcome with and without it (scale runs and default runs with the
// workload and restarts that replay into replicas of their own).
func TestSharedReplicasSameRun(t *testing.T) {
	cfgs := []Config{ScaleConfig(11, 25, 1024)}
	seeds := uint64(3)
	if !raceEnabled && !testing.Short() {
		cfgs, seeds = append(cfgs, ScaleConfig(7, 40, 1024)), 6
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		cfgs = append(cfgs, DefaultConfig(seed))
	}
	private := 0 // nodes that restarted into a replica of their own
	for _, cfg := range cfgs {
		own, shared := cfg, cfg
		own.SharedReplicas, shared.SharedReplicas = false, true
		a, err := Run(own)
		if err != nil {
			t.Fatal(err)
		}
		sim, err := New(shared)
		if err != nil {
			t.Fatal(err)
		}
		b := sim.Run()
		for _, n := range sim.nodes {
			if n.up && n.fsm != nil {
				private++
			}
		}
		got := fmt.Sprintf("%d %d %x %v %d %d %d %d", b.Events, b.Commits, b.TraceHash, b.Violations, b.LeaderChanges, b.Takeovers, b.Handoffs, b.Expiries)
		want := fmt.Sprintf("%d %d %x %v %d %d %d %d", a.Events, a.Commits, a.TraceHash, a.Violations, a.LeaderChanges, a.Takeovers, a.Handoffs, a.Expiries)
		if got != want {
			t.Errorf("profile %s seed %d, %d nodes: shared replicas ran differently:\n got %s\nwant %s", cfg.Profile, cfg.Seed, cfg.Nodes, got, want)
		}
	}
	if private == 0 {
		t.Error("no node restarted into a replica of its own: the mixed case is not covered")
	}
	t.Logf("%d nodes ended with a replica of their own", private)
}
