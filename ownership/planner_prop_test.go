package ownership

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// genInput draws an arbitrary (not necessarily consistent) world.
func genInput(t *rapid.T, partitions int) Input {
	ids := []string{"a", "b", "c", "d", "e"}
	var in Input
	for _, id := range ids {
		if rapid.Bool().Draw(t, "has-node-"+id) {
			in.Nodes = append(in.Nodes, ledger.NodeRecord{ID: id,
				Incarnation: rapid.Uint64Range(1, 3).Draw(t, "inc"),
				Liveness:    rapid.Uint64Range(1, 3).Draw(t, "live"),
				Seq:         rapid.Uint64Range(1, 5).Draw(t, "seq"),
				Draining:    rapid.Float64Range(0, 1).Draw(t, "drain") < 0.1})
		}
		for range rapid.IntRange(0, 2).Draw(t, "members-"+id) {
			in.Members = append(in.Members, Member{ID: id,
				Incarnation: rapid.Uint64Range(1, 3).Draw(t, "minc"),
				State:       member.State(rapid.IntRange(0, 3).Draw(t, "state")),
				Health:      rapid.Float64Range(0, 1).Draw(t, "health"),
				Draining:    rapid.Float64Range(0, 1).Draw(t, "mdrain") < 0.1})
		}
	}
	for s := range partitions {
		if !rapid.Bool().Draw(t, "has-shard") {
			continue
		}
		in.Shards = append(in.Shards, ledger.ShardRecord{Shard: uint32(s),
			Epoch:            rapid.Uint64Range(0, 4).Draw(t, "epoch"),
			Owner:            rapid.SampledFrom(ids).Draw(t, "owner"),
			OwnerIncarnation: rapid.Uint64Range(1, 3).Draw(t, "oinc"),
			OwnerLiveness:    rapid.Uint64Range(1, 3).Draw(t, "olive"),
			State:            ledger.ShardState(rapid.IntRange(0, 2).Draw(t, "sstate")),
			Target:           rapid.SampledFrom(append(ids, "")).Draw(t, "target")})
	}
	return in
}

func shuffled(r *rand.Rand, in Input) Input {
	out := Input{Members: slices.Clone(in.Members), Shards: slices.Clone(in.Shards), Nodes: slices.Clone(in.Nodes)}
	r.Shuffle(len(out.Members), func(i, j int) { out.Members[i], out.Members[j] = out.Members[j], out.Members[i] })
	r.Shuffle(len(out.Shards), func(i, j int) { out.Shards[i], out.Shards[j] = out.Shards[j], out.Shards[i] })
	r.Shuffle(len(out.Nodes), func(i, j int) { out.Nodes[i], out.Nodes[j] = out.Nodes[j], out.Nodes[i] })
	return out
}

func render(cmds []ledger.Command) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "%#v\n", c)
	}
	return b.String()
}

// TestPlannerDeterministicProperty: the planner's output is byte-identical
// for shuffled inputs, and one round never proposes two changes for a shard
// nor a grant on a validly owned shard other than a takeover.
func TestPlannerDeterministicProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := TestConfig()
		cfg.Ring.Partitions = 8
		in := genInput(t, cfg.Ring.Partitions)
		seed := rapid.Uint64().Draw(t, "shuffle-seed")
		r := rand.New(rand.NewPCG(seed, 1))
		steps := rapid.SliceOfN(rapid.Int64Range(0, int64(3*time.Second)), 1, 6).Draw(t, "steps")

		a, _ := NewPlanner(cfg)
		b, _ := NewPlanner(cfg)
		a.Establish(t0, in, time.Time{})
		b.Establish(t0, shuffled(r, in), time.Time{})
		now := t0
		for _, d := range steps {
			now = now.Add(time.Duration(d))
			ca, errA := a.Plan(now, in)
			cb, errB := b.Plan(now, shuffled(r, in))
			if ra, rb := render(ca), render(cb); ra != rb || (errA == nil) != (errB == nil) {
				t.Fatalf("shuffled input changed the output:\n%s\nvs\n%s", ra, rb)
			}
			tb := newTable(in.Shards, in.Nodes)
			seen := map[uint32]bool{}
			for _, c := range ca {
				var s uint32
				switch c := c.(type) {
				case ledger.Grant:
					s = c.Shard
					rec := tb.shard(s)
					if tb.valid(rec) && !(c.Takeover && rec.State == ledger.ShardRevoking) {
						t.Fatalf("grant of a validly owned shard: %s", FormatCommand(c))
					}
					if c.ExpectedEpoch != rec.Epoch {
						t.Fatalf("grant not CAS on the seen epoch: %s (epoch %d)", FormatCommand(c), rec.Epoch)
					}
				case ledger.Revoke:
					s = c.Shard
				default:
					continue
				}
				if seen[s] {
					t.Fatalf("two proposals for shard %d: %s", s, render(ca))
				}
				seen[s] = true
			}
		}
	})
}

// TestPlannerMoreNodesThanShards: with more eligible nodes than shards the
// ring is built over a subset (owners first) instead of failing, so every
// shard still gets an owner.
func TestPlannerMoreNodesThanShards(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 2
	cfg.Ring.Load = 2
	e := newPlannerEnv(t, cfg)
	for i := range 5 {
		id := fmt.Sprintf("n%d", i+1)
		e.members[id] = Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1}
		e.ledger.heartbeat(id, 1, false)
	}
	e.p.Establish(t0, e.input(), time.Time{})
	if _, err := e.p.Plan(t0.Add(100*time.Millisecond), e.input()); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	cmds, err := e.p.Plan(t0.Add(700*time.Millisecond), e.input())
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if len(cmds) != 2 || len(e.p.RingMembers()) != 2 {
		t.Fatalf("want 2 grants over a 2-member ring, got %s (ring %v)", render(cmds), e.p.RingMembers())
	}
}
