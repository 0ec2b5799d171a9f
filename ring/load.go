package ring

import (
	"cmp"
	"math"
	"slices"
)

// ShardLoad is one shard's reported load (any non-negative unit the
// application uses across the cluster: requests/s, queue depth, CPU).
type ShardLoad struct {
	Shard uint32
	Load  float64
}

// LoadView is the input of LoadSwap: a settled placement (every member at
// its quota) and the members' load summaries as gossip carries them — each
// member's total and its few hottest shards, not every shard's load.
type LoadView struct {
	// Owners is the owner of every shard (index = shard).
	Owners []string
	// Members are the placement members; every one must have a Total.
	Members []string
	// Weights as in Placement (missing or 0: 1): a member's fair share of
	// the load is proportional to its weight.
	Weights map[string]int
	// Totals is each member's total load.
	Totals map[string]float64
	// Hot lists, per member, its hottest shards with their loads. Entries
	// for shards Owners does not give that member are ignored (stale).
	Hot map[string][]ShardLoad
	// Fixed, optional, marks shards that must not move (operator pins).
	Fixed []bool
	// Threshold: a member is hot when its load exceeds (1+Threshold)·its
	// fair share (e.g. 0.25); below that nothing moves.
	Threshold float64
	// MinGain: a swap must bring the higher of the two members' loads
	// (over their shares) at least this fraction (e.g. 0.05) below the
	// hot member's before. With loads that do not change, every swap
	// strictly lowers the pair's maximum and never raises anyone else's,
	// so no sequence of swaps returns to an earlier placement (no
	// flapping), and tiny gains move nothing.
	MinGain float64
}

// Swap is a load move: Hot goes From → To and Back goes To → From, so
// every member keeps its shard count (Assign's quotas) and Assign of the
// result moves nothing.
type Swap struct {
	Hot, Back uint32
	From, To  string
	// Load of Hot as reported, and Back's estimate (the mean of To's
	// shards outside its hot list).
	HotLoad, BackLoad float64
	// MaxBefore is From's load over its fair share before; MaxAfter the
	// higher of From's and To's after.
	MaxBefore, MaxAfter float64
}

// LoadSwap picks at most one swap that moves load off the most loaded
// member (relative to its weight): one of its reported hot shards goes to
// another member, which gives back the shard it ranks lowest (rendezvous
// score, as Assign's excess) outside its hot list and Fixed; of all such
// swaps the one that leaves the lower maximum of the two members wins. It is pure and
// deterministic; ok is false when no member is above the threshold or no
// swap helps enough. Call it only on a settled placement and at a bounded
// rate (the planner's LoadConfig); the loads must be re-measured after
// each swap.
func LoadSwap(v LoadView) (Swap, bool) {
	members := slices.Clone(v.Members)
	slices.Sort(members)
	if len(members) < 2 {
		return Swap{}, false
	}
	var total, weight float64
	for _, m := range members {
		l, ok := v.Totals[m]
		if !ok || math.IsNaN(l) || math.IsInf(l, 0) || l < 0 {
			return Swap{}, false // an unknown or bad total: do nothing
		}
		total += l
		weight += float64(max(v.Weights[m], 1))
	}
	if total <= 0 {
		return Swap{}, false
	}
	share := func(m string) float64 { return total * float64(max(v.Weights[m], 1)) / weight }
	ratio := func(m string) float64 { return v.Totals[m] / share(m) }
	byRatio := slices.Clone(members)
	slices.SortStableFunc(byRatio, func(a, b string) int { return cmp.Compare(ratio(a), ratio(b)) })
	hot := byRatio[len(byRatio)-1]
	if ratio(hot) <= 1+v.Threshold {
		return Swap{}, false
	}
	fixed := func(s uint32) bool { return int(s) < len(v.Fixed) && v.Fixed[s] }
	// The hot member's reported shards it still owns, hottest first.
	var cands []ShardLoad
	for _, sl := range v.Hot[hot] {
		if int(sl.Shard) < len(v.Owners) && v.Owners[sl.Shard] == hot && !fixed(sl.Shard) && sl.Load > 0 && !math.IsInf(sl.Load, 0) {
			cands = append(cands, sl)
		}
	}
	slices.SortStableFunc(cands, func(a, b ShardLoad) int {
		return cmp.Or(cmp.Compare(b.Load, a.Load), cmp.Compare(a.Shard, b.Shard))
	})
	lh, before := v.Totals[hot], ratio(hot)
	var best Swap
	found := false
	for _, to := range byRatio[:len(byRatio)-1] {
		back, backLoad, ok := coldShard(v, to, fixed)
		if !ok {
			continue
		}
		for _, a := range cands {
			if a.Load <= backLoad {
				continue
			}
			after := max((lh-a.Load+backLoad)/share(hot), (v.Totals[to]+a.Load-backLoad)/share(to))
			if after > before*(1-v.MinGain) || (found && after >= best.MaxAfter) {
				continue
			}
			best, found = Swap{Hot: a.Shard, Back: back, From: hot, To: to, HotLoad: a.Load, BackLoad: backLoad,
				MaxBefore: before, MaxAfter: after}, true
		}
	}
	return best, found
}

// coldShard is the shard member gives back in a swap — the one it ranks
// lowest by rendezvous score among its shards outside its hot list and
// fixed — with the estimated load of such a shard (the mean of its
// unreported shards).
func coldShard(v LoadView, member string, fixed func(uint32) bool) (uint32, float64, bool) {
	hot := map[uint32]bool{}
	hotSum := 0.0
	for _, sl := range v.Hot[member] {
		if int(sl.Shard) < len(v.Owners) && v.Owners[sl.Shard] == member && !hot[sl.Shard] {
			hot[sl.Shard] = true
			hotSum += sl.Load
		}
	}
	seed := memberSeed(member)
	best, n := -1, 0
	for s, o := range v.Owners {
		if o != member || hot[uint32(s)] {
			continue
		}
		n++
		if fixed(uint32(s)) {
			continue
		}
		if best < 0 || score(seed, uint32(s)) < score(seed, uint32(best)) {
			best = s
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	return uint32(best), max(v.Totals[member]-hotSum, 0) / float64(n), true
}
