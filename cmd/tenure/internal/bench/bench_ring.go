package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/ring"
)

// Default grid of `tenure bench ring`.
var (
	benchRingPartitions = []int{271, 1024, 4096}
	benchRingMembers    = []int{3, 10, 50, 100}
)

// benchRingLookups is the number of ShardFor+Owner calls timed per case.
const benchRingLookups = 1 << 18

func init() {
	registerBench("ring", "ring placement: balance, movement on join/leave, build and lookup time", benchRing)
}

// ringCase is one line of `tenure bench ring` output.
type ringCase struct {
	Partitions            int     `json:"partitions"`
	Members               int     `json:"members"`
	MaxOverAvg            float64 `json:"max_over_avg"`
	MinOverAvg            float64 `json:"min_over_avg"`
	MovedJoinOverOptimal  float64 `json:"moved_join_over_optimal"`
	MovedLeaveOverOptimal float64 `json:"moved_leave_over_optimal"`
	BuildMS               float64 `json:"build_ms"`
	LookupNS              float64 `json:"lookup_ns"`
	MovedJoinMax          float64 `json:"moved_join_over_optimal_max"`
	MovedLeaveMax         float64 `json:"moved_leave_over_optimal_max"`
	Trials                int     `json:"trials"`
	OptimalJoin           float64 `json:"optimal_join"`
	OptimalLeave          float64 `json:"optimal_leave"`
	MaxLoad               int     `json:"max_load"`
	MinLoad               int     `json:"min_load"`
	Load                  float64 `json:"load"`
	ReplicationFactor     int     `json:"replication_factor"`
	MinLoadFloor          float64 `json:"min_load_floor"`
}

func benchRing(_ context.Context, m *Env, args []string) error {
	fs := flag.NewFlagSet("bench ring", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	grid := newCaseGrid(fs, benchRingPartitions, benchRingMembers, "joins and leaves per case (different members); moved_* are their mean")
	load := fs.Float64("load", ring.DefaultLoad, "bounded-load factor")
	rf := fs.Int("rf", ring.DefaultReplicationFactor, "virtual nodes per member")
	minLoad := fs.Float64("min-load", ring.DefaultMinLoad, "min-load pass floor as a fraction of the average (0 disables the pass)")
	fs.Usage = func() {
		fmt.Fprintln(m.Stderr, "usage: tenure bench ring [flags]")
		fmt.Fprintln(m.Stderr, "Builds rings for each partitions × members case, adds one member and removes one,")
		fmt.Fprintln(m.Stderr, "and reports balance, shards moved over the optimum (P/(N+1) on join, P/N on leave;")
		fmt.Fprintln(m.Stderr, "mean and max over -trials different joiners and leavers),")
		fmt.Fprintln(m.Stderr, "build time and ShardFor+Owner lookup time.")
		fs.PrintDefaults()
	}
	if err := grid.parse(fs, args); err != nil {
		return err
	}
	cfg := ring.DefaultConfig()
	cfg.Load, cfg.ReplicationFactor, cfg.MinLoad = *load, *rf, *minLoad
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("bench ring: %w", err)
	}

	out := caseOutput[ringCase]{w: m.Stdout, asJSON: *grid.asJSON, table: printRingTable}
	for _, p := range grid.partitions {
		for _, n := range grid.members {
			cfg.Partitions = p
			rc, err := runRingCase(cfg, n, *grid.trials)
			if err != nil {
				return fmt.Errorf("bench ring: partitions=%d members=%d: %w", p, n, err)
			}
			if err := out.add(rc); err != nil {
				return err
			}
		}
	}
	return out.flush()
}

// runRingCase builds a ring of n members, then for each trial t adds member
// "join-t" and (separately) removes the member at an evenly spread index,
// and measures the shards moved against the optimum.
func runRingCase(cfg ring.Config, n, trials int) (ringCase, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
	}
	start := time.Now()
	base, err := ring.New(cfg, names)
	build := time.Since(start)
	if err != nil {
		return ringCase{}, err
	}
	p := float64(cfg.Partitions)
	avg := p / float64(n)
	optJoin, optLeave := p/float64(n+1), avg
	var sumJoin, sumLeave, maxJoin, maxLeave float64
	for t := 0; t < trials; t++ {
		join, err := ring.New(cfg, append(slices.Clone(names), fmt.Sprintf("join-%d", t)))
		if err != nil {
			return ringCase{}, fmt.Errorf("join: %w", err)
		}
		i := t * n / trials
		leave, err := ring.New(cfg, slices.Delete(slices.Clone(names), i, i+1))
		if err != nil {
			return ringCase{}, fmt.Errorf("leave: %w", err)
		}
		j := float64(len(ring.Diff(base, join))) / optJoin
		l := float64(len(ring.Diff(base, leave))) / optLeave
		sumJoin, sumLeave = sumJoin+j, sumLeave+l
		maxJoin, maxLeave = max(maxJoin, j), max(maxLeave, l)
	}

	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("tenant-" + strconv.Itoa(i))
	}
	var sink int
	start = time.Now()
	for i := 0; i < benchRingLookups; i++ {
		sink += len(base.Owner(cfg.ShardFor(keys[i&(len(keys)-1)])))
	}
	lookup := time.Since(start)
	if sink == 0 {
		return ringCase{}, fmt.Errorf("lookups found no owner")
	}

	rc := ringCase{
		Partitions:            cfg.Partitions,
		Members:               n,
		MaxLoad:               base.MaxLoad(),
		MinLoad:               base.MinLoad(),
		MovedJoinOverOptimal:  sumJoin / float64(trials),
		MovedLeaveOverOptimal: sumLeave / float64(trials),
		MovedJoinMax:          maxJoin,
		MovedLeaveMax:         maxLeave,
		Trials:                trials,
		OptimalJoin:           optJoin,
		OptimalLeave:          optLeave,
		BuildMS:               float64(build.Microseconds()) / 1000,
		LookupNS:              float64(lookup.Nanoseconds()) / benchRingLookups,
		Load:                  cfg.Load,
		ReplicationFactor:     cfg.ReplicationFactor,
		MinLoadFloor:          cfg.MinLoad,
	}
	rc.MaxOverAvg = float64(rc.MaxLoad) / avg
	rc.MinOverAvg = float64(rc.MinLoad) / avg
	return rc, nil
}

func printRingTable(w io.Writer, rs []ringCase) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partitions\tmembers\tmax_over_avg\tmin_over_avg\tmoved_join_over_optimal\t(max)\tmoved_leave_over_optimal\t(max)\tbuild_ms\tlookup_ns\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\t%.1f\t\n",
			r.Partitions, r.Members, r.MaxOverAvg, r.MinOverAvg, r.MovedJoinOverOptimal, r.MovedJoinMax, r.MovedLeaveOverOptimal, r.MovedLeaveMax, r.BuildMS, r.LookupNS)
	}
	return tw.Flush()
}
