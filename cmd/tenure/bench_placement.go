package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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
}

func benchPlacement(_ context.Context, m *Main, args []string) error {
	fs := flag.NewFlagSet("bench placement", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per case")
	parts := fs.String("partitions", joinInts(benchPlacementPartitions), "comma-separated partition counts")
	mems := fs.String("members", joinInts(benchPlacementMembers), "comma-separated member counts")
	trials := fs.Int("trials", 5, "joins and leaves per case (different members)")
	fs.Usage = func() {
		fmt.Fprintln(m.Stderr, "usage: tenure bench placement [flags]")
		fmt.Fprintln(m.Stderr, "For each partitions × members case, settles a placement with ring.Assign (what the")
		fmt.Fprintln(m.Stderr, "planner uses), then adds one member and removes one (-trials different ones) and")
		fmt.Fprintln(m.Stderr, "reports max/avg, min/avg, shards moved and the optimum (P/(N+1) join, P/N leave).")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench placement: unexpected arguments %q", strings.Join(fs.Args(), " "))
	}
	ps, err := parseInts("partitions", *parts)
	if err != nil {
		return err
	}
	ns, err := parseInts("members", *mems)
	if err != nil {
		return err
	}
	if *trials < 1 {
		return fmt.Errorf("bench placement: -trials = %d, want ≥ 1", *trials)
	}
	var results []placementCase
	enc := json.NewEncoder(m.Stdout)
	for _, p := range ps {
		for _, n := range ns {
			pc, err := runPlacementCase(p, n, *trials)
			if err != nil {
				return fmt.Errorf("bench placement: partitions=%d members=%d: %w", p, n, err)
			}
			if *asJSON {
				if err := enc.Encode(pc); err != nil {
					return err
				}
			}
			results = append(results, pc)
		}
	}
	if !*asJSON {
		return printPlacementTable(m.Stdout, results)
	}
	return nil
}

func balance(assign []string, members []string, p int) (maxOver, minOver float64) {
	loads := ring.Loads(assign, members)
	hi, lo := 0, p
	for _, l := range loads {
		hi, lo = max(hi, l), min(lo, l)
	}
	avg := float64(p) / float64(len(members))
	return float64(hi) / avg, float64(lo) / avg
}

func runPlacementCase(p, n, trials int) (placementCase, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
	}
	assign := func(members, prev []string) ([]string, error) {
		return ring.Assign(ring.Placement{Partitions: p, Members: members, Prev: prev})
	}
	start := time.Now()
	base, err := assign(names, nil)
	scratch := time.Since(start)
	if err != nil {
		return placementCase{}, err
	}
	pc := placementCase{Partitions: p, Members: n, Trials: trials, FixedPoint: true,
		OptimalJoin: float64(p) / float64(n+1), OptimalLeave: float64(p) / float64(n),
		AssignMS: float64(scratch.Microseconds()) / 1000}
	pc.MaxOverAvg, pc.MinOverAvg = balance(base, names, p)
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
		mx, mn := balance(out, members, p)
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
	return pc, nil
}

func printPlacementTable(w io.Writer, rs []placementCase) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partitions\tmembers\tmax/avg\tmin/avg\tworst max/avg\tworst min/avg\tjoin moved\t(max)\toptimal\tleave moved\t(max)\toptimal\t≤1.1·opt+1\tfixed point\tscratch_ms\tchange_ms\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%d\t%.2f\t%.1f\t%d\t%.2f\t%v\t%v\t%.2f\t%.2f\t\n",
			r.Partitions, r.Members, r.MaxOverAvg, r.MinOverAvg, r.WorstMaxOverAvg, r.WorstMinOverAvg,
			r.MovedJoin, r.MovedJoinMax, r.OptimalJoin, r.MovedLeave, r.MovedLeaveMax, r.OptimalLeave,
			r.MovesWithinTarget, r.FixedPoint, r.AssignMS, r.ChangeMS)
	}
	return tw.Flush()
}
