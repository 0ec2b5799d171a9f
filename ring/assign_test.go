package ring

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genPlacement draws a partition count, a member set and an arbitrary
// previous assignment over those members, strangers and "".
func genPlacement(t *rapid.T) Placement {
	p := rapid.IntRange(1, 700).Draw(t, "partitions")
	members := genNames(t, 40)
	pool := append(slices.Clone(members), "", "stranger-1", "stranger-2")
	prev := rapid.SliceOfN(rapid.SampledFrom(pool), 0, p).Draw(t, "prev")
	pl := Placement{Partitions: p, Members: members, Prev: prev}
	if len(members) > 0 && rapid.Bool().Draw(t, "weighted") {
		pl.Weights = map[string]int{}
		for _, m := range members {
			pl.Weights[m] = rapid.IntRange(0, 8).Draw(t, "weight")
		}
	}
	if len(members) > 0 && rapid.Bool().Draw(t, "zoned") {
		zones := rapid.IntRange(1, 4).Draw(t, "zones")
		pl.Zones = map[string]string{}
		for _, m := range members {
			pl.Zones[m] = fmt.Sprintf("z%d", rapid.IntRange(0, zones-1).Draw(t, "zone"))
		}
	}
	if len(members) > 0 && rapid.IntRange(0, 3).Draw(t, "pinned") == 0 {
		pl.Pins = rapid.SliceOfN(rapid.SampledFrom(append(pool, "", "", "", "")), 0, p).Draw(t, "pins")
	}
	return pl
}

// plain strips weights, zones and pins.
func plain(pl Placement) Placement {
	return Placement{Partitions: pl.Partitions, Members: pl.Members, Prev: pl.Prev}
}

func mustAssign(t interface{ Fatalf(string, ...any) }, pl Placement) []string {
	out, err := Assign(pl)
	if err != nil {
		t.Fatalf("Assign(P=%d, N=%d): %v", pl.Partitions, len(pl.Members), err)
	}
	return out
}

// checkBalanced: every shard owned by a member, each member at its quota
// (floor or ceil of P/N).
func checkBalanced(t *rapid.T, pl Placement, out []string) {
	p, members := pl.Partitions, pl.Members
	if len(out) != p {
		t.Fatalf("len %d, want %d", len(out), p)
	}
	if len(members) == 0 {
		for s, o := range out {
			if o != "" {
				t.Fatalf("shard %d owned by %q with no members", s, o)
			}
		}
		return
	}
	loads := Loads(out, members)
	q := PlacementQuotas(pl)
	lo, hi := p/len(members), (p+len(members)-1)/len(members)
	weighted := len(pl.Weights)+len(pl.Zones)+len(pl.Pins) > 0
	sum := 0
	for m, l := range loads {
		if l != q[m] || (!weighted && (l < lo || l > hi)) {
			t.Fatalf("member %q holds %d, quota %d, bounds [%d, %d]", m, l, q[m], lo, hi)
		}
		sum += l
	}
	if sum != p {
		t.Fatalf("members hold %d shards, want %d (an owner is not a member)", sum, p)
	}
}

func TestAssignBalancedProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pl := genPlacement(t)
		out := mustAssign(t, pl)
		checkBalanced(t, pl, out)
		// Order of members does not matter.
		shuffled := pl
		shuffled.Members = rapid.Permutation(pl.Members).Draw(t, "shuffled")
		if again := mustAssign(t, shuffled); !slices.Equal(out, again) {
			t.Fatalf("result depends on member order")
		}
		// Keep: a member never loses a shard while it is at or below its
		// quota, and never gains one while it was above it (pinned shards
		// aside: they go to their pin).
		q := PlacementQuotas(pl)
		isPinned := func(s int) bool {
			if s >= len(pl.Pins) {
				return false
			}
			_, member := q[pl.Pins[s]]
			return member
		}
		// before: what each member holds once the pins are applied.
		held := make([]string, pl.Partitions)
		for s := range held {
			switch {
			case isPinned(s):
				held[s] = pl.Pins[s]
			case s < len(pl.Prev):
				held[s] = pl.Prev[s]
			}
		}
		before := Loads(held, pl.Members)
		for s := range pl.Partitions {
			if isPinned(s) {
				if out[s] != pl.Pins[s] {
					t.Fatalf("shard %d pinned to member %q is on %q", s, pl.Pins[s], out[s])
				}
				continue
			}
			if o := held[s]; o != out[s] {
				if _, member := q[o]; member && before[o] <= q[o] {
					t.Fatalf("shard %d moved from %q (held %d ≤ quota %d) to %q", s, o, before[o], q[o], out[s])
				}
				if out[s] != "" && before[out[s]] >= q[out[s]] {
					t.Fatalf("shard %d moved to %q, which held %d ≥ quota %d", s, out[s], before[out[s]], q[out[s]])
				}
			}
		}
	})
}

func TestAssignIdempotentProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pl := genPlacement(t)
		out := mustAssign(t, pl)
		pl.Prev = out
		if again := mustAssign(t, pl); !slices.Equal(out, again) {
			t.Fatalf("Assign is not a fixed point: %d shards move on a second application", CountMoves(out, again))
		}
	})
}

// optimal is the least number of shards a join (to n+1 members) or a leave
// (to n−1) must move, as a real number: P/(n+1) or P/n.
func withinMoveTarget(moves int, optimal float64) bool {
	return float64(moves) <= 1.1*optimal+1
}

func TestAssignSingleJoinLeaveProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pl := plain(genPlacement(t))
		if len(pl.Members) == 0 {
			return
		}
		base := mustAssign(t, pl)
		p, n := pl.Partitions, len(pl.Members)

		joiner := rapid.StringMatching(`join-[0-9]{1,3}`).Filter(func(s string) bool { return !slices.Contains(pl.Members, s) }).Draw(t, "joiner")
		joined := append(slices.Clone(pl.Members), joiner)
		afterJoin := mustAssign(t, Placement{Partitions: p, Members: joined, Prev: base})
		moves := CountMoves(base, afterJoin)
		if got := Loads(afterJoin, joined)[joiner]; moves != got {
			t.Fatalf("join moved %d shards, the joiner got %d: shards moved between old members", moves, got)
		}
		if !withinMoveTarget(moves, float64(p)/float64(n+1)) {
			t.Fatalf("join moved %d shards, optimal %.2f (P=%d, N=%d)", moves, float64(p)/float64(n+1), p, n)
		}

		leaver := rapid.SampledFrom(pl.Members).Draw(t, "leaver")
		left := slices.DeleteFunc(slices.Clone(pl.Members), func(m string) bool { return m == leaver })
		afterLeave := mustAssign(t, Placement{Partitions: p, Members: left, Prev: base})
		moves = CountMoves(base, afterLeave)
		if held := Loads(base, pl.Members)[leaver]; len(left) > 0 && moves != held {
			t.Fatalf("leave moved %d shards, the leaver held %d", moves, held)
		}
		if len(left) > 0 && !withinMoveTarget(moves, float64(p)/float64(n)) {
			t.Fatalf("leave moved %d shards, optimal %.2f (P=%d, N=%d)", moves, float64(p)/float64(n), p, n)
		}
	})
}

// TestAssignPathIndependentProp: after any membership change, every
// intermediate state on the way (each shard at its old owner, its new one,
// or — if it moves — unowned) leads to the same result, so no shard moves twice for one
// change however the moves are split over rounds or leaders.
func TestAssignPathIndependentProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pl := genPlacement(t)
		base := mustAssign(t, pl)
		// An arbitrary change: some members leave, some join.
		next := slices.DeleteFunc(slices.Clone(pl.Members), func(string) bool { return rapid.Bool().Draw(t, "leaves") })
		for k := range rapid.IntRange(0, 3).Draw(t, "joins") {
			if j := fmt.Sprintf("new-%d", k); !slices.Contains(next, j) {
				next = append(next, j)
			}
		}
		// Start from the balanced base or from the raw previous state.
		from := base
		if rapid.Bool().Draw(t, "raw") {
			from = pl.Prev
		}
		target := mustAssign(t, Placement{Partitions: pl.Partitions, Members: next, Prev: from})
		mid := make([]string, pl.Partitions)
		for s := range mid {
			var old string
			if s < len(from) {
				old = from[s]
			}
			switch rapid.IntRange(0, 2).Draw(t, "step") {
			case 0:
				mid[s] = old
			case 1:
				mid[s] = target[s]
			case 2:
				// Released on its way: only a shard that moves is.
				if old == target[s] {
					mid[s] = old
				}
			}
		}
		if got := mustAssign(t, Placement{Partitions: pl.Partitions, Members: next, Prev: mid}); !slices.Equal(got, target) {
			diff := 0
			for s := range got {
				if got[s] != target[s] {
					diff++
				}
			}
			t.Fatalf("an intermediate state leads elsewhere: %d shards differ", diff)
		}
	})
}

// TestAssignAvoid: a resigned shard goes to another member and is not
// moved back to rebalance; the resigner gets a different shard.
func TestAssignAvoid(t *testing.T) {
	members := []string{"a", "b", "c"}
	base := mustAssign(t, Placement{Partitions: 30, Members: members})
	var s int
	for s = range base {
		if base[s] == "a" {
			break
		}
	}
	prev := slices.Clone(base)
	prev[s] = "" // released with Avoid
	avoid := make([]string, 30)
	avoid[s] = "a"
	out := mustAssign(t, Placement{Partitions: 30, Members: members, Prev: prev, Avoid: avoid})
	if out[s] == "a" || out[s] == "" {
		t.Fatalf("resigned shard %d went to %q", s, out[s])
	}
	if l := Loads(out, members); l["a"] != 10 || l["b"] != 10 || l["c"] != 10 {
		t.Fatalf("unbalanced after a resignation: %v", l)
	}
	if again := mustAssign(t, Placement{Partitions: 30, Members: members, Prev: out, Avoid: avoid}); !slices.Equal(again, out) {
		t.Fatalf("not a fixed point with the hint: %d moves", CountMoves(out, again))
	}
	if m := CountMoves(base, out); m != 2 {
		t.Fatalf("a resignation moved %d shards, want 2 (the shard, and one back to the resigner)", m)
	}
	// With only the resigner, it keeps the shard.
	solo := mustAssign(t, Placement{Partitions: 30, Members: []string{"a"}, Prev: prev, Avoid: avoid})
	if solo[s] != "a" {
		t.Fatalf("sole member did not get the resigned shard: %q", solo[s])
	}
}

func TestAssignErrors(t *testing.T) {
	for _, tc := range []struct {
		pl   Placement
		want error
	}{
		{Placement{Partitions: 0}, ErrInvalidConfig},
		{Placement{Partitions: MaxPartitions + 1}, ErrInvalidConfig},
		{Placement{Partitions: 8, Members: []string{"a", ""}}, ErrInvalidMember},
		{Placement{Partitions: 8, Members: []string{"a", "a"}}, ErrDuplicateMember},
	} {
		if _, err := Assign(tc.pl); !errors.Is(err, tc.want) {
			t.Errorf("Assign(%+v) = %v, want %v", tc.pl, err, tc.want)
		}
	}
	out, err := Assign(Placement{Partitions: 4})
	if err != nil || len(out) != 4 || out[0] != "" {
		t.Fatalf("no members: %q, %v", out, err)
	}
	// More members than shards: each shard to one member, quota 0 or 1.
	many := make([]string, 10)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	out = mustAssign(t, Placement{Partitions: 4, Members: many})
	for m, l := range Loads(out, many) {
		if l > 1 || l != Quotas(4, many)[m] {
			t.Fatalf("%s holds %d", m, l)
		}
	}
}

// TestAssignGrid checks the issue-17 targets on the bench grid: every
// single join and leave from a settled state moves ≤ 1.1·optimal + 1, and
// balance is exact (max − min ≤ 1).
func TestAssignGrid(t *testing.T) {
	if testing.Short() {
		t.Skip("grid")
	}
	for _, p := range []int{64, 271, 1024, 4096} {
		for _, n := range []int{3, 10, 50, 100, 200} {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("node-%03d", i)
			}
			base := mustAssign(t, Placement{Partitions: p, Members: names})
			for trial := range 3 {
				join := mustAssign(t, Placement{Partitions: p, Members: append(slices.Clone(names), fmt.Sprintf("join-%d", trial)), Prev: base})
				if m := CountMoves(base, join); !withinMoveTarget(m, float64(p)/float64(n+1)) {
					t.Errorf("P=%d N=%d join moved %d", p, n, m)
				}
				i := trial * n / 3
				leave := mustAssign(t, Placement{Partitions: p, Members: slices.Delete(slices.Clone(names), i, i+1), Prev: base})
				if m := CountMoves(base, leave); !withinMoveTarget(m, float64(p)/float64(n)) {
					t.Errorf("P=%d N=%d leave moved %d", p, n, m)
				}
			}
			loads := Loads(base, names)
			lo, hi := math.MaxInt, 0
			for _, l := range loads {
				lo, hi = min(lo, l), max(hi, l)
			}
			if hi-lo > 1 {
				t.Errorf("P=%d N=%d loads %d..%d", p, n, lo, hi)
			}
		}
	}
}

// TestAssignWeightsZonesProp: with weights and zones, a member's quota is
// within 2 shards of its weighted share P·w/W (within 1 without zones), a
// zone's total within 1 of its share P·Wzone/W, and a membership change
// moves exactly the shards the new quotas require (the members' total
// deficit): nothing moves between members whose quota did not grow.
func TestAssignWeightsZonesProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pl := genPlacement(t)
		pl.Pins = nil
		if len(pl.Members) == 0 {
			return
		}
		out := mustAssign(t, pl)
		checkBalanced(t, pl, out)
		loads := Loads(out, pl.Members)
		var total float64
		zoneW := map[string]float64{}
		zoneLoad := map[string]int{}
		for _, m := range pl.Members {
			w := float64(max(pl.Weights[m], 1))
			total += w
			zoneW[pl.Zones[m]] += w
			zoneLoad[pl.Zones[m]] += loads[m]
		}
		slack := 1.0
		if len(pl.Zones) > 0 {
			slack = 2
		}
		for _, m := range pl.Members {
			share := float64(pl.Partitions) * float64(max(pl.Weights[m], 1)) / total
			if math.Abs(float64(loads[m])-share) >= slack {
				t.Fatalf("member %q (weight %d, zone %q) holds %d, weighted share %.2f", m, pl.Weights[m], pl.Zones[m], loads[m], share)
			}
		}
		for z, w := range zoneW {
			share := float64(pl.Partitions) * w / total
			if math.Abs(float64(zoneLoad[z])-share) >= 1 {
				t.Fatalf("zone %q holds %d, share %.2f", z, zoneLoad[z], share)
			}
		}

		// A change: a joiner (in some zone, with some weight) and a leaver.
		next := pl
		next.Prev = out
		next.Members = slices.Clone(pl.Members)
		next.Weights, next.Zones = maps.Clone(pl.Weights), maps.Clone(pl.Zones)
		if rapid.Bool().Draw(t, "join") {
			next.Members = append(next.Members, "joiner")
			if next.Weights != nil {
				next.Weights["joiner"] = rapid.IntRange(1, 8).Draw(t, "joiner weight")
			}
			if next.Zones != nil {
				next.Zones["joiner"] = fmt.Sprintf("z%d", rapid.IntRange(0, 4).Draw(t, "joiner zone"))
			}
		} else if len(next.Members) > 1 {
			i := rapid.IntRange(0, len(next.Members)-1).Draw(t, "leaver")
			next.Members = slices.Delete(next.Members, i, i+1)
		}
		after := mustAssign(t, next)
		checkBalanced(t, next, after)
		q := PlacementQuotas(next)
		kept := Loads(out, next.Members)
		deficit := 0
		for m, qm := range q {
			deficit += max(qm-kept[m], 0)
		}
		if moves := CountMoves(out, after); moves != deficit {
			t.Fatalf("the change moved %d shards, the new quotas need %d", moves, deficit)
		}
	})
}

// TestAssignPins: a pinned shard goes to its member and stays there; the
// member sheds another shard instead, so the balance holds; a pin to a
// non-member is ignored; many pins raise the member's quota.
func TestAssignPins(t *testing.T) {
	members := []string{"a", "b", "c"}
	base := mustAssign(t, Placement{Partitions: 30, Members: members})
	s := slices.Index(base, "b")
	pins := make([]string, 30)
	pins[s] = "a"
	out := mustAssign(t, Placement{Partitions: 30, Members: members, Prev: base, Pins: pins})
	if out[s] != "a" {
		t.Fatalf("pinned shard %d on %q", s, out[s])
	}
	if l := Loads(out, members); l["a"] != 10 || l["b"] != 10 || l["c"] != 10 {
		t.Fatalf("unbalanced after a pin: %v", l)
	}
	if m := CountMoves(base, out); m != 2 {
		t.Fatalf("a pin moved %d shards, want 2 (the shard, one back from the pin's member)", m)
	}
	// Unpinning moves nothing (a fixed point either way).
	if again := mustAssign(t, Placement{Partitions: 30, Members: members, Prev: out}); !slices.Equal(again, out) {
		t.Fatalf("unpin moved %d shards", CountMoves(out, again))
	}
	// A pin to a non-member is ignored.
	pins[s] = "gone"
	if again := mustAssign(t, Placement{Partitions: 30, Members: members, Prev: base, Pins: pins}); !slices.Equal(again, base) {
		t.Fatalf("a pin to a non-member moved %d shards", CountMoves(base, again))
	}
	// 20 pins on c: c's quota is 20, a and b share the other 10.
	for i := range pins {
		pins[i] = ""
		if i < 20 {
			pins[i] = "c"
		}
	}
	out = mustAssign(t, Placement{Partitions: 30, Members: members, Prev: base, Pins: pins})
	if l := Loads(out, members); l["c"] != 20 || l["a"] != 5 || l["b"] != 5 {
		t.Fatalf("20 pins on c: %v", l)
	}
}

func TestAssignWeightErrors(t *testing.T) {
	for _, w := range []int{-1, MaxWeight + 1} {
		if _, err := Assign(Placement{Partitions: 8, Members: []string{"a"}, Weights: map[string]int{"a": w}}); !errors.Is(err, ErrInvalidMember) {
			t.Errorf("weight %d: %v, want ErrInvalidMember", w, err)
		}
	}
}
