package ownership

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// TestElectionPlacementProperty: with groups, election shards and
// resignation hints in an arbitrary world, the planner's output is
// identical for shuffled inputs, and every grant or revoke target of an
// election shard is a member of the election's group.
func TestElectionPlacementProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := TestConfig()
		cfg.Ring.Partitions = 8
		in := genInput(t, cfg.Ring.Partitions)
		groups := []string{"x", "y", "z"}
		// Mostly healthy, gossiped members that keep heartbeating (below),
		// so that nodes enter the ring and elections get placed.
		for _, n := range in.Nodes {
			if rapid.IntRange(0, 4).Draw(t, "healthy?") != 0 {
				in.Members = append(in.Members, Member{ID: n.ID, Incarnation: n.Incarnation, State: member.Alive, Health: 1})
			}
		}
		groupOf := map[string]string{}
		for i := range in.Members {
			id := in.Members[i].ID
			if _, ok := groupOf[id]; !ok {
				groupOf[id] = rapid.SampledFrom(groups).Draw(t, "group-"+id)
			}
			in.Members[i].Group = groupOf[id]
		}
		for k := range rapid.IntRange(0, 4).Draw(t, "elections") {
			s := uint32(cfg.Ring.Partitions + k)
			in.Elections = append(in.Elections, ledger.ElectionRecord{Group: rapid.SampledFrom(groups).Draw(t, "egroup"),
				Name: "e", Shard: s})
			if rapid.Bool().Draw(t, "has-eshard") {
				in.Shards = append(in.Shards, ledger.ShardRecord{Shard: s,
					Epoch:            rapid.Uint64Range(0, 4).Draw(t, "epoch"),
					Owner:            rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}).Draw(t, "owner"),
					OwnerIncarnation: rapid.Uint64Range(1, 3).Draw(t, "oinc"),
					OwnerLiveness:    rapid.Uint64Range(1, 3).Draw(t, "olive"),
					State:            ledger.ShardState(rapid.IntRange(0, 2).Draw(t, "sstate"))})
			}
		}
		for i := range in.Shards {
			if rapid.IntRange(0, 3).Draw(t, "avoid?") == 0 {
				in.Shards[i].AvoidOwner = rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "avoid")
			}
		}
		electionGroup := map[uint32]string{}
		for _, e := range in.Elections {
			electionGroup[e.Shard] = e.Group
		}
		seed := rapid.Uint64().Draw(t, "shuffle-seed")
		r := rand.New(rand.NewPCG(seed, 2))
		shuffle := func(in Input) Input {
			out := shuffled(r, in)
			out.Elections = slices.Clone(in.Elections)
			r.Shuffle(len(out.Elections), func(i, j int) { out.Elections[i], out.Elections[j] = out.Elections[j], out.Elections[i] })
			return out
		}
		steps := rapid.SliceOfN(rapid.Int64Range(0, int64(time.Second)), 1, 8).Draw(t, "steps")
		a, _ := NewPlanner(cfg)
		b, _ := NewPlanner(cfg)
		a.Establish(t0, in, time.Time{})
		b.Establish(t0, shuffle(in), time.Time{})
		now := t0
		for _, d := range steps {
			now = now.Add(time.Duration(d))
			for i := range in.Nodes {
				in.Nodes[i].Seq++ // a heartbeat of every node
			}
			ca, errA := a.Plan(now, in)
			cb, errB := b.Plan(now, shuffle(in))
			if ra, rb := render(ca), render(cb); ra != rb || (errA == nil) != (errB == nil) {
				t.Fatalf("shuffled input changed the output:\n%s\nvs\n%s", ra, rb)
			}
			seen := map[uint32]bool{}
			for _, c := range ca {
				var s uint32
				var to string
				switch c := c.(type) {
				case ledger.Grant:
					s, to = c.Shard, c.Owner
				case ledger.Revoke:
					s, to = c.Shard, c.Target
				default:
					continue
				}
				if seen[s] {
					t.Fatalf("two proposals for shard %d: %s", s, render(ca))
				}
				seen[s] = true
				if g, ok := electionGroup[s]; ok && groupOf[to] != g {
					t.Fatalf("election shard %d of group %q placed on %q of group %q: %s", s, g, to, groupOf[to], FormatCommand(c))
				}
			}
		}
	})
}

func TestRendezvousOrderIndependent(t *testing.T) {
	cands := []string{"n1", "n2", "n3", "n4", "n5"}
	counts := map[string]int{}
	for s := range uint32(1000) {
		want := rendezvous(s, cands)
		rev := slices.Clone(cands)
		slices.Reverse(rev)
		if got := rendezvous(s, rev); got != want {
			t.Fatalf("shard %d: %s vs %s for reversed candidates", s, got, want)
		}
		counts[want]++
	}
	for _, c := range cands {
		if counts[c] < 120 { // 200 expected each
			t.Fatalf("rendezvous badly skewed: %v", counts)
		}
	}
	if rendezvous(1, nil) != "" {
		t.Fatal("no candidates must give no target")
	}
}

func TestSteer(t *testing.T) {
	rec := ledger.ShardRecord{Shard: 3, AvoidOwner: "a"}
	if got := steer(rec, false, "a", []string{"a"}); got != "a" {
		t.Fatalf("only candidate: %q, want the resigner", got)
	}
	if got := steer(rec, false, "a", []string{"a", "b", "c"}); got == "a" || got == "" {
		t.Fatalf("steer chose %q", got)
	}
	rec.Owner, rec.State = "c", ledger.ShardOwned
	if got := steer(rec, true, "a", []string{"a", "b", "c"}); got != "c" {
		t.Fatalf("a valid non-avoided owner keeps the shard: %q", got)
	}
	if got := steer(rec, true, "b", []string{"a", "b", "c"}); got != "b" {
		t.Fatalf("target not the avoided node is unchanged: %q", got)
	}
}
