package bench

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/ring"
)

// Default grid of `tenure bench placement` (issue 17).
var (
	benchPlacementPartitions = []int{64, 271, 1024, 4096}
	benchPlacementMembers    = []int{3, 10, 50, 100, 200}
)

func init() {
	registerBench("placement", "planner placement (ring.Assign): balance and shards moved per join/leave vs the optimum", benchPlacement)
}

// placementCase is one line of `tenure bench placement` output. Moves are
// counted from a settled placement (ring.Assign from scratch, then applied
// again: a fixed point) to ring.Assign of the changed member set over it,
// exactly what the planner would propose. The optimum is P/(N+1) shards
// for a join and P/N for a leave; the target is ≤ 1.1·optimum + 1.
type placementCase struct {
	Partitions int `json:"partitions"`
	Members    int `json:"members"`
	// Weighted: members weigh 1, 2 and 4 in turn and sit in 3 zones
	// (zone i mod 3); balance is then load over weighted share, and the
	// optimum of a join (weight 2) or leave is the member's share.
	Weighted bool `json:"weighted"`
	// Balance of the settled placement, and the worst over every placement
	// after a join or leave.
	MaxOverAvg      float64 `json:"max_over_avg"`
	MinOverAvg      float64 `json:"min_over_avg"`
	WorstMaxOverAvg float64 `json:"worst_max_over_avg"`
	WorstMinOverAvg float64 `json:"worst_min_over_avg"`
	// Shards moved: mean and max over the trials, and the optimum.
	MovedJoin         float64 `json:"moved_join"`
	MovedJoinMax      int     `json:"moved_join_max"`
	OptimalJoin       float64 `json:"optimal_join"`
	MovedLeave        float64 `json:"moved_leave"`
	MovedLeaveMax     int     `json:"moved_leave_max"`
	OptimalLeave      float64 `json:"optimal_leave"`
	JoinOverOptimal   float64 `json:"moved_join_over_optimal"`
	LeaveOverOptimal  float64 `json:"moved_leave_over_optimal"`
	MovesWithinTarget bool    `json:"moves_within_target"`
	// Second application of every result moved nothing (never two moves
	// for one change).
	FixedPoint bool    `json:"fixed_point"`
	Trials     int     `json:"trials"`
	AssignMS   float64 `json:"assign_from_scratch_ms"`
	ChangeMS   float64 `json:"assign_change_ms"`
	// Load skew: every shard weighs 1 except 3 hot shards of P/(2N) each,
	// all on the first member; nodes gossip their total and 3 hottest
	// shards, and ring.LoadSwap (threshold 0.25, min gain 0.05) runs until
	// it proposes nothing. Load max/avg (over weighted share) before and
	// after, the swaps (2 moves each) it took, and whether the counts
	// stayed at ring.Assign's quotas.
	LoadMaxOverAvgBefore float64 `json:"load_max_over_avg_before"`
	LoadMaxOverAvgAfter  float64 `json:"load_max_over_avg_after"`
	LoadSwaps            int     `json:"load_swaps"`
	LoadCountsKept       bool    `json:"load_counts_kept"`
}

func benchPlacement(_ context.Context, m *Env, args []string) error {
	fs := flag.NewFlagSet("bench placement", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	grid := newCaseGrid(fs, benchPlacementPartitions, benchPlacementMembers, "joins and leaves per case (different members)")
	cases := fs.String("cases", "plain,weighted", "comma-separated: plain (equal members), weighted (weights 1,2,4 in 3 zones)")
	fs.Usage = func() {
		fmt.Fprintln(m.Stderr, "usage: tenure bench placement [flags]")
		fmt.Fprintln(m.Stderr, "For each partitions × members case, settles a placement with ring.Assign (what the")
		fmt.Fprintln(m.Stderr, "planner uses), then adds one member and removes one (-trials different ones) and")
		fmt.Fprintln(m.Stderr, "reports max/avg, min/avg, shards moved and the optimum (P/(N+1) join, P/N leave).")
		fs.PrintDefaults()
	}
	if err := grid.parse(fs, args); err != nil {
		return err
	}
	var weighted []bool
	for _, c := range strings.Split(*cases, ",") {
		switch strings.TrimSpace(c) {
		case "plain":
			weighted = append(weighted, false)
		case "weighted":
			weighted = append(weighted, true)
		default:
			return fmt.Errorf("bench placement: -cases %q: want plain and/or weighted", *cases)
		}
	}
	out := caseOutput[placementCase]{w: m.Stdout, asJSON: *grid.asJSON, table: printPlacementTable}
	for _, w := range weighted {
		for _, p := range grid.partitions {
			for _, n := range grid.members {
				pc, err := runPlacementCase(p, n, *grid.trials, w)
				if err != nil {
					return fmt.Errorf("bench placement: partitions=%d members=%d weighted=%v: %w", p, n, w, err)
				}
				if err := out.add(pc); err != nil {
					return err
				}
			}
		}
	}
	return out.flush()
}

// balance is the most and least loaded member's shards over its share
// (P/N, or P·w/W with weights).
func balance(assign []string, members []string, p int, weights map[string]int) (maxOver, minOver float64) {
	loads := ring.Loads(assign, members)
	w := 0
	for _, m := range members {
		w += max(weights[m], 1)
	}
	maxOver, minOver = 0, math.Inf(1)
	for _, m := range members {
		share := float64(p) * float64(max(weights[m], 1)) / float64(w)
		maxOver, minOver = max(maxOver, float64(loads[m])/share), min(minOver, float64(loads[m])/share)
	}
	return maxOver, minOver
}

func runPlacementCase(p, n, trials int, weighted bool) (placementCase, error) {
	names := make([]string, n)
	weights, zones := map[string]int{}, map[string]string{}
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
		if weighted {
			weights[names[i]] = []int{1, 2, 4}[i%3]
			zones[names[i]] = fmt.Sprintf("zone-%d", i%3)
		}
	}
	for t := range trials {
		if weighted {
			weights[fmt.Sprintf("join-%d", t)] = 2
			zones[fmt.Sprintf("join-%d", t)] = fmt.Sprintf("zone-%d", t%3)
		}
	}
	if !weighted {
		weights, zones = nil, nil
	}
	assign := func(members, prev []string) ([]string, error) {
		return ring.Assign(ring.Placement{Partitions: p, Members: members, Prev: prev, Weights: weights, Zones: zones})
	}
	start := time.Now()
	base, err := assign(names, nil)
	scratch := time.Since(start)
	if err != nil {
		return placementCase{}, err
	}
	pc := placementCase{Partitions: p, Members: n, Weighted: weighted, Trials: trials, FixedPoint: true,
		OptimalJoin: float64(p) / float64(n+1), OptimalLeave: float64(p) / float64(n),
		AssignMS: float64(scratch.Microseconds()) / 1000}
	if weighted {
		// The optimum is the joiner's (weight 2) or the leaver's share.
		w := 0
		for _, m := range names {
			w += weights[m]
		}
		pc.OptimalJoin = float64(p) * 2 / float64(w+2)
		pc.OptimalLeave = 0
		for t := range trials {
			pc.OptimalLeave += float64(p) * float64(weights[names[t*n/trials]]) / float64(w) / float64(trials)
		}
	}
	pc.MaxOverAvg, pc.MinOverAvg = balance(base, names, p, weights)
	pc.WorstMaxOverAvg, pc.WorstMinOverAvg = pc.MaxOverAvg, pc.MinOverAvg
	settle := func(members, prev []string) ([]string, int, error) {
		out, err := assign(members, prev)
		if err != nil {
			return nil, 0, err
		}
		again, err := assign(members, out)
		if err != nil {
			return nil, 0, err
		}
		if !slices.Equal(out, again) {
			pc.FixedPoint = false
		}
		mx, mn := balance(out, members, p, weights)
		pc.WorstMaxOverAvg, pc.WorstMinOverAvg = max(pc.WorstMaxOverAvg, mx), min(pc.WorstMinOverAvg, mn)
		return out, ring.CountMoves(prev, out), nil
	}
	if _, moved, err := settle(names, base); err != nil || moved != 0 {
		return pc, fmt.Errorf("settled placement moved %d shards on re-application (%v)", moved, err)
	}
	var sumJoin, sumLeave int
	var changes time.Duration
	for t := range trials {
		start := time.Now()
		_, j, err := settle(append(slices.Clone(names), fmt.Sprintf("join-%d", t)), base)
		changes += time.Since(start)
		if err != nil {
			return pc, fmt.Errorf("join: %w", err)
		}
		i := t * n / trials
		l := 0
		if n > 1 {
			if _, l, err = settle(slices.Delete(slices.Clone(names), i, i+1), base); err != nil {
				return pc, fmt.Errorf("leave: %w", err)
			}
		}
		sumJoin, sumLeave = sumJoin+j, sumLeave+l
		pc.MovedJoinMax, pc.MovedLeaveMax = max(pc.MovedJoinMax, j), max(pc.MovedLeaveMax, l)
	}
	pc.ChangeMS = float64(changes.Microseconds()) / 1000 / float64(trials) / 2 // two Assigns per settle
	pc.MovedJoin = float64(sumJoin) / float64(trials)
	pc.MovedLeave = float64(sumLeave) / float64(trials)
	pc.JoinOverOptimal = pc.MovedJoin / pc.OptimalJoin
	pc.LeaveOverOptimal = pc.MovedLeave / pc.OptimalLeave
	pc.MovesWithinTarget = float64(pc.MovedJoinMax) <= 1.1*pc.OptimalJoin+1 &&
		float64(pc.MovedLeaveMax) <= 1.1*pc.OptimalLeave+1
	if weighted {
		// A leave's optimum is that member's own shards: compare the mean.
		pc.MovesWithinTarget = pc.MovedJoin <= 1.1*pc.OptimalJoin+1 && pc.MovedLeave <= 1.1*pc.OptimalLeave+1
	}
	if n > 1 {
		if err := loadSkew(&pc, base, names, weights, zones); err != nil {
			return pc, err
		}
	}
	return pc, nil
}

// loadSkew runs the load-skew scenario of placementCase over the settled
// placement base.
func loadSkew(pc *placementCase, base, names []string, weights map[string]int, zones map[string]string) error {
	p, n := pc.Partitions, pc.Members
	loads := make([]float64, p)
	for s := range loads {
		loads[s] = 1
	}
	hot := 0
	for s, o := range base {
		if o == names[0] && hot < 3 {
			loads[s] = max(float64(p)/float64(2*n), 1)
			hot++
		}
	}
	owners := slices.Clone(base)
	ratio := func() float64 {
		totals := map[string]float64{}
		for s, o := range owners {
			totals[o] += loads[s]
		}
		sum, w := 0.0, 0
		for _, m := range names {
			sum += totals[m]
			w += max(weights[m], 1)
		}
		worst := 0.0
		for _, m := range names {
			worst = max(worst, totals[m]/(sum*float64(max(weights[m], 1))/float64(w)))
		}
		return worst
	}
	pc.LoadMaxOverAvgBefore = ratio()
	pc.LoadCountsKept = true
	for range p {
		v := ring.LoadView{Owners: owners, Members: names, Weights: weights, Totals: map[string]float64{},
			Hot: map[string][]ring.ShardLoad{}, Threshold: 0.25, MinGain: 0.05}
		for s, o := range owners {
			v.Totals[o] += loads[s]
			v.Hot[o] = append(v.Hot[o], ring.ShardLoad{Shard: uint32(s), Load: loads[s]})
		}
		for _, m := range names {
			h := v.Hot[m]
			slices.SortStableFunc(h, func(a, b ring.ShardLoad) int { return cmp.Compare(b.Load, a.Load) })
			v.Hot[m] = h[:min(3, len(h))] // what gossip carries
			if _, ok := v.Totals[m]; !ok {
				v.Totals[m] = 0
			}
		}
		sw, ok := ring.LoadSwap(v)
		if !ok {
			break
		}
		owners[sw.Hot], owners[sw.Back] = sw.To, sw.From
		pc.LoadSwaps++
		again, err := ring.Assign(ring.Placement{Partitions: p, Members: names, Prev: owners, Weights: weights, Zones: zones})
		if err != nil {
			return err
		}
		if !slices.Equal(again, owners) {
			pc.LoadCountsKept = false
		}
	}
	pc.LoadMaxOverAvgAfter = ratio()
	return nil
}

func printPlacementTable(w io.Writer, rs []placementCase) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tpartitions\tmembers\tmax/avg\tmin/avg\tworst max/avg\tworst min/avg\tjoin moved\t(max)\toptimal\tleave moved\t(max)\toptimal\t≤1.1·opt+1\tfixed point\tscratch_ms\tchange_ms\tload max/avg\tafter\tswaps\t")
	for _, r := range rs {
		c := "plain"
		if r.Weighted {
			c = "weighted"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%d\t%.2f\t%.1f\t%d\t%.2f\t%v\t%v\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n",
			c, r.Partitions, r.Members, r.MaxOverAvg, r.MinOverAvg, r.WorstMaxOverAvg, r.WorstMinOverAvg,
			r.MovedJoin, r.MovedJoinMax, r.OptimalJoin, r.MovedLeave, r.MovedLeaveMax, r.OptimalLeave,
			r.MovesWithinTarget, r.FixedPoint, r.AssignMS, r.ChangeMS, r.LoadMaxOverAvgBefore, r.LoadMaxOverAvgAfter, r.LoadSwaps)
	}
	return tw.Flush()
}
