package ownership

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ring"
)

// TestPlannerOneMovePerChangeProperty drives the planner through a cold
// start, then one join or graceful leave carried out under the churn
// budget (handoffs by Transfer or Release, in any order, optionally with a
// leader change halfway), and checks that no shard changes owner twice,
// that the moves are exactly the optimum (the joiner's quota, or the
// leaver's shards), and that the end is ring.Assign's balanced fixed point.
func TestPlannerOneMovePerChangeProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := TestConfig()
		cfg.Ring.Partitions = rapid.IntRange(10, 120).Draw(rt, "partitions") // > nodes+1: no spares
		cfg.MaxMovesInFlight = rapid.IntRange(1, 6).Draw(rt, "k")
		n := rapid.IntRange(2, 9).Draw(rt, "nodes")
		e := newPlannerEnv(t, cfg)
		for i := range n {
			id := fmt.Sprintf("n%d", i+1)
			e.members[id] = Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1}
			e.ledger.heartbeat(id, 1, false)
		}
		now := t0
		e.p.Establish(now, e.input(), time.Time{})
		step := func() []ledger.Command {
			now = now.Add(200 * time.Millisecond)
			// Every node keeps heartbeating: a graceful leaver is alive
			// while it hands its shards over.
			for _, id := range sortedKeys(e.members) {
				e.ledger.heartbeat(id, 1, false)
			}
			cmds, err := e.p.Plan(now, e.input())
			if err != nil {
				rt.Fatalf("Plan: %v", err)
			}
			for _, c := range cmds {
				if err := e.ledger.apply(c); err != nil {
					rt.Fatalf("%s rejected: %v", FormatCommand(c), err)
				}
			}
			return cmds
		}
		settle := func(handoff func(s uint32)) {
			quiet := 0
			for range 400 {
				cmds := step()
				revoking := false
				for _, r := range e.ledger.shards() {
					if r.State == ledger.ShardRevoking {
						revoking = true
						handoff(r.Shard)
					}
				}
				if len(cmds) == 0 && !revoking {
					if quiet++; quiet >= 8 {
						return
					}
				} else {
					quiet = 0
				}
			}
			rt.Fatalf("placement did not settle")
		}
		settle(func(s uint32) { e.ledger.handoff(s, true) })
		owners := func() []string {
			out := make([]string, cfg.Ring.Partitions)
			for _, r := range e.ledger.shards() {
				if int(r.Shard) < len(out) && r.State == ledger.ShardOwned {
					out[r.Shard] = r.Owner
				}
			}
			return out
		}
		before := owners()

		// One membership change.
		members := sortedKeys(e.members)
		var optimum int
		if rapid.Bool().Draw(rt, "join") {
			id := "joiner"
			e.members[id] = Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1}
			e.ledger.heartbeat(id, 1, false)
			members = append(members, id)
			optimum = ring.Quotas(cfg.Ring.Partitions, members)[id]
		} else {
			leaver := rapid.SampledFrom(members).Draw(rt, "leaver")
			m := e.members[leaver]
			m.State = member.Left
			e.members[leaver] = m
			optimum = ring.Loads(before, members)[leaver]
			members = slices.DeleteFunc(members, func(id string) bool { return id == leaver })
		}
		changes := make([]int, cfg.Ring.Partitions)
		last := slices.Clone(before)
		leaderChangeAt := rapid.IntRange(0, 30).Draw(rt, "leaderChangeAt")
		handoffs := 0
		settle(func(s uint32) {
			if handoffs++; handoffs == leaderChangeAt {
				e.p.StepDown()
				e.p.Establish(now, e.input(), time.Time{})
			}
			e.ledger.handoff(s, rapid.Bool().Draw(rt, "transfer"))
			for sh, o := range owners() {
				if o != "" && o != last[sh] {
					changes[sh]++
					last[sh] = o
				}
			}
		})
		after := owners()
		for sh, o := range after {
			if o != "" && o != last[sh] {
				changes[sh]++
			}
			if changes[sh] > 1 {
				rt.Fatalf("shard %d changed owner %d times for one change", sh, changes[sh])
			}
		}
		if moved := ring.CountMoves(before, after); moved != optimum {
			rt.Fatalf("moved %d shards, optimum %d", moved, optimum)
		}
		want, err := ring.Assign(ring.Placement{Partitions: cfg.Ring.Partitions, Members: members, Prev: after})
		if err != nil || !slices.Equal(want, after) {
			rt.Fatalf("end state is not Assign's fixed point (%v)", err)
		}
	})
}
