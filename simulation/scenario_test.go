package simulation

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/tenurehq/tenure/ledger"
)

// TestSimScripts runs the named scenarios in testdata/scenarios.
//
//	sim [seed=N] [nodes=N] [voters=N] [duration=D] [faults-until=D] [watch=S,S] [workload=false]
//	    [zones=z1,z2,...] [weights=1,2,...] [loads=S:L,S:L] [settle=D] [fenced=F-L,F-L]
//	    [version=V] [upgrade-at=D] [profile=test|fast]
//	fault at=D kind=K node=nI|leader|owner:S [dur=D] [value=F]
//	run      run to the end; print violations, leader changes and the timeline
func TestSimScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		var cfg Config
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			arg := func(key, def string) string {
				for _, a := range td.CmdArgs {
					if a.Key == key && len(a.Vals) > 0 {
						return a.Vals[0]
					}
				}
				return def
			}
			dur := func(key, def string) time.Duration {
				d, err := time.ParseDuration(arg(key, def))
				if err != nil {
					t.Fatalf("%s: %v", td.Pos, err)
				}
				return d
			}
			num := func(key, def string) int {
				v, err := strconv.Atoi(arg(key, def))
				if err != nil {
					t.Fatalf("%s: %v", td.Pos, err)
				}
				return v
			}
			switch td.Cmd {
			case "sim":
				switch prof := arg("profile", "test"); prof {
				case "test":
					cfg = DefaultConfig(uint64(num("seed", "1")))
				case "fast":
					cfg = fastProfileConfig(uint64(num("seed", "1")))
				default:
					t.Fatalf("%s: unknown profile %q", td.Pos, prof)
				}
				cfg.RandomFaults = false
				cfg.Nodes = num("nodes", "5")
				cfg.Voters = num("voters", "3")
				cfg.Duration = dur("duration", "13s")
				cfg.FaultsUntil = dur("faults-until", "5s")
				cfg.Workload = arg("workload", "true") == "true"
				cfg.ClusterVersion = uint32(num("version", "0"))
				cfg.UpgradeAt = dur("upgrade-at", "0s")
				cfg.Faults = []Fault{}
				cfg.Watch = nil
				if z := arg("zones", ""); z != "" {
					cfg.Zones = strings.Split(z, ",")
				}
				if w := arg("weights", ""); w != "" {
					for _, x := range strings.Split(w, ",") {
						v, err := strconv.Atoi(x)
						if err != nil {
							t.Fatalf("%s: weights: %v", td.Pos, err)
						}
						cfg.Weights = append(cfg.Weights, v)
					}
				}
				if l := arg("loads", ""); l != "" {
					cfg.ShardLoads = map[uint32]float64{}
					for _, kv := range strings.Split(l, ",") {
						k, v, _ := strings.Cut(kv, ":")
						sh, err1 := strconv.Atoi(k)
						val, err2 := strconv.ParseFloat(v, 64)
						if err1 != nil || err2 != nil {
							t.Fatalf("%s: loads %q", td.Pos, kv)
						}
						cfg.ShardLoads[uint32(sh)] = val
					}
				}
				cfg.Ownership.Load.Settle = dur("settle", cfg.Ownership.Load.Settle.String())
				cfg.Fenced = nil
				if f := arg("fenced", ""); f != "" {
					// fenced=F-L,F-L: shard ranges under fenced takeover
					for _, r := range strings.Split(f, ",") {
						a, b, _ := strings.Cut(r, "-")
						first, err1 := strconv.Atoi(a)
						last, err2 := strconv.Atoi(b)
						if err1 != nil || err2 != nil {
							t.Fatalf("%s: fenced %q", td.Pos, r)
						}
						cfg.Fenced = append(cfg.Fenced, ledger.ShardRange{First: uint32(first), Last: uint32(last)})
					}
				}
				for _, w := range strings.Split(arg("watch", ""), ",") {
					if w != "" {
						v, _ := strconv.Atoi(w)
						cfg.Watch = append(cfg.Watch, uint32(v))
					}
				}
				return ""
			case "fault":
				kind, err := ParseFaultKind(arg("kind", ""))
				if err != nil {
					t.Fatalf("%s: %v", td.Pos, err)
				}
				f := Fault{At: dur("at", "0s"), Kind: kind, Dur: dur("dur", "0s")}
				f.Value, _ = strconv.ParseFloat(arg("value", "0"), 64)
				switch who := arg("node", "n1"); {
				case who == "leader":
					f.Node = LeaderNode
				case strings.HasPrefix(who, "owner:"):
					v, _ := strconv.Atoi(strings.TrimPrefix(who, "owner:"))
					f.Node, f.Shard = OwnerOf, uint32(v)
				default:
					v, err := strconv.Atoi(strings.TrimPrefix(who, "n"))
					if err != nil {
						t.Fatalf("%s: bad node %q", td.Pos, who)
					}
					f.Node = v - 1
				}
				cfg.Faults = append(cfg.Faults, f)
				return ""
			case "run":
				res, err := Run(cfg)
				if err != nil {
					t.Fatalf("%s: %v", td.Pos, err)
				}
				var b strings.Builder
				if len(res.Violations) == 0 {
					b.WriteString("violations: none\n")
				}
				for _, v := range res.Violations {
					fmt.Fprintf(&b, "violation: %s\n", v)
				}
				fmt.Fprintf(&b, "leader elections: %d, expiries proposed: %d, takeovers: %d, handoffs: %d\n",
					res.LeaderChanges, res.Expiries, res.Takeovers, res.Handoffs)
				if cfg.Fenced != nil {
					fmt.Fprintf(&b, "fenced overlaps (S4 waived): %d\n", res.FencedOverlaps)
				}
				if cfg.ClusterVersion != 0 || cfg.UpgradeAt != 0 {
					fmt.Fprintf(&b, "commits: %d, renewals acked: %d in %d confirm rounds\n", res.Commits, res.Renewals, res.ConfirmRounds)
				}
				if res.ZoneShards != nil {
					fmt.Fprintf(&b, "partitions per zone: %v\n", res.ZoneShards)
				}
				if cfg.ShardLoads != nil {
					fmt.Fprintf(&b, "load max/avg at the end: %.2f\n", res.LoadMaxOverAvg)
				}
				for _, l := range res.Timeline {
					b.WriteString(l + "\n")
				}
				if res.Failed() {
					t.Errorf("%s: scenario violated a guarantee\n%s", td.Pos, replayHint(cfg.Seed, false))
				}
				return b.String()
			}
			t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
			return ""
		})
	})
}
