package node

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ownership"
)

// TestProfileTable checks that every row of the profile table is
// consistent: the node's Timing (its guard, its workers' deadlines) is the
// lease the tracker and the planner run with, every layer's configuration
// is valid, and the layers' timings fit together.
func TestProfileTable(t *testing.T) {
	if got := Profiles(); len(got) != 3 || got[0] != ProfileFast || got[1] != ProfileDefault || got[2] != ProfileSafe {
		t.Fatalf("Profiles() = %v, want [fast default safe]", got)
	}
	if _, ok := Profile("warp").Timing(); ok {
		t.Fatal(`Profile("warp").Timing() ok`)
	}
	if a, _ := Profile("").Timing(); a != mustTiming(t, ProfileDefault) {
		t.Fatalf(`Profile("").Timing() = %+v, want the default profile's`, a)
	}
	for _, p := range Profiles() {
		t.Run(string(p), func(t *testing.T) {
			cfg := ConfigFromEnv(func(string) string { return "" })
			cfg.NodeID, cfg.Profile, cfg.DataDir = "n1", p, t.TempDir()
			cfg.GossipAddr, cfg.RaftAddr = "127.0.0.1:7946", "127.0.0.1:7947"
			timing := mustTiming(t, p)

			// The node and the tracker: one lease.
			oc := ownershipConfig(cfg)
			if got := timingOf(oc); got != timing {
				t.Errorf("Timing() = %+v but the tracker runs with %+v", timing, got)
			}
			if err := oc.Validate(); err != nil {
				t.Errorf("ownership config: %v", err)
			}
			// The node stops starting work a guard before its lease
			// (counted with the drift margin) ends; the guard must leave
			// room for work and be shorter than a renewal period.
			agent, err := ownership.NewAgent(oc, "n1", 1)
			if err != nil {
				t.Fatal(err)
			}
			guard := agent.Guard()
			safeLease := time.Duration(float64(timing.Lease) * (1 - timing.MaxDrift))
			if guard <= 0 || guard >= timing.RenewEvery || guard >= safeLease/2 {
				t.Errorf("guard %v: want 0 < guard < RenewEvery %v and < Lease·(1−δ)/2 %v", guard, timing.RenewEvery, safeLease/2)
			}
			// Every production profile drains at least a lease, so a
			// drained shard's takeover never waits on the drain alone.
			if timing.DrainTimeout < timing.Lease {
				t.Errorf("DrainTimeout %v < Lease %v", timing.DrainTimeout, timing.Lease)
			}

			// Gossip.
			mc, err := membershipConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := mc.Validate(); err != nil {
				t.Errorf("membership config: %v", err)
			}

			// The control group: a Raft leader's own lease and a leader
			// election fit in one node lease, so a leader change does not
			// by itself cost every node its lease.
			row, _ := p.row()
			cc := row.control()
			if cc.LeaderLeaseTimeout >= timing.Lease || cc.ElectionTimeout >= timing.Lease {
				t.Errorf("raft LeaderLeaseTimeout %v, ElectionTimeout %v: want both below the lease %v",
					cc.LeaderLeaseTimeout, cc.ElectionTimeout, timing.Lease)
			}
		})
	}
}

func mustTiming(t *testing.T, p Profile) Timing {
	t.Helper()
	tm, ok := p.Timing()
	if !ok {
		t.Fatalf("profile %q has no timing", p)
	}
	return tm
}

// TestProfileTableMatchesDocs compares the profile table with the timing
// table of docs/protocol.md ("Timing parameters").
func TestProfileTableMatchesDocs(t *testing.T) {
	f, err := os.Open("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cols []Profile
	rows := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "|") {
			if len(cols) > 0 && len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) < 5 {
			continue
		}
		if cells[0] == "name" {
			for _, c := range cells[2:] {
				cols = append(cols, Profile(c))
			}
			continue
		}
		if name, _, ok := strings.Cut(strings.Trim(cells[0], "`"), "`"); ok && len(cols) > 0 {
			rows[name] = cells[2:]
		}
	}
	if len(cols) != len(profileTable) {
		t.Fatalf("docs/protocol.md timing table has columns %v, want one per profile %v", cols, Profiles())
	}
	for i, p := range cols {
		tm, ok := p.Timing()
		if !ok {
			t.Errorf("docs/protocol.md names profile %q, which the table lacks", p)
			continue
		}
		want := map[string]string{
			"Lease": docDuration(tm.Lease), "RenewEvery": docDuration(tm.RenewEvery),
			"MaxDrift": strconv.FormatFloat(tm.MaxDrift, 'g', -1, 64), "DrainTimeout": docDuration(tm.DrainTimeout),
		}
		for name, w := range want {
			r, ok := rows[name]
			if !ok || i >= len(r) {
				t.Errorf("docs/protocol.md timing table has no %s row", name)
				continue
			}
			if r[i] != w {
				t.Errorf("docs/protocol.md: %s of %s is %q, the profile table says %q", name, p, r[i], w)
			}
		}
	}
}

// docDuration writes d as docs/protocol.md does: "200 ms", "1 s".
func docDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + " s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
}
