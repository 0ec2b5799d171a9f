package httpapi

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// TestObserveShardsEqualsObserveTable: the sampler fed only the shards
// that changed (ShardFeedBackend) reports what it reports when it diffs
// the whole table every time — the owned and unowned gauges, ownership
// changes, moves by cause, acquisitions and losses — over random changes
// of a 64-shard table (seed printed).
func TestObserveShardsEqualsObserveTable(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 1))
	newObs := func() *shardObserver {
		m, err := newMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return newShardObserver(m, "n1")
	}
	full, incr := newObs(), newObs()
	table := make([]apitypes.Shard, 64)
	for i := range table {
		table[i] = apitypes.Shard{Shard: uint32(i), State: "unowned"}
	}
	now := time.Unix(1000, 0)
	full.observeTable(now, table)
	incr.observeTable(now, table)
	owners := []string{"n1", "n2", "n3"}
	for step := range 2000 {
		now = now.Add(time.Duration(r.IntN(100)) * time.Millisecond)
		touched := map[int]bool{}
		for range 1 + r.IntN(4) {
			i := r.IntN(len(table))
			touched[i] = true
			s := &table[i]
			switch r.IntN(5) {
			case 0: // granted
				s.Epoch++
				s.Owner, s.State, s.Valid = owners[r.IntN(3)], "owned", true
				s.Acting = s.Owner == "n1" && r.IntN(2) == 0
			case 1:
				s.State = "revoking"
			case 2: // the owner's lease lapsed
				s.Valid, s.Acting = false, false
			case 3:
				s.Epoch++
				s.State, s.Valid, s.Acting = "unowned", false, false
			case 4:
				s.Acting = s.Owner == "n1" && s.Valid && !s.Acting
			}
		}
		var changed []apitypes.Shard // each changed shard once, as it is now (what ShardsSince reads)
		for i := range table {
			if touched[i] {
				changed = append(changed, table[i])
			}
		}
		full.observeTable(now, table)
		incr.observeShards(now, changed)
		for _, c := range []struct {
			name string
			a, b prometheus.Collector
		}{
			{"shards_owned", full.m.shardsOwned, incr.m.shardsOwned},
			{"shards_unowned", full.m.shardsUnowned, incr.m.shardsUnowned},
			{"ownership_changes", full.m.ownershipChanges, incr.m.ownershipChanges},
			{"acquired", full.m.acquired, incr.m.acquired},
			{"lost", full.m.lost, incr.m.lost},
			{"moves planned", full.m.moves.WithLabelValues(movePlanned), incr.m.moves.WithLabelValues(movePlanned)},
			{"moves failover", full.m.moves.WithLabelValues(moveFailover), incr.m.moves.WithLabelValues(moveFailover)},
			{"moves other", full.m.moves.WithLabelValues(moveOther), incr.m.moves.WithLabelValues(moveOther)},
		} {
			if a, b := testutil.ToFloat64(c.a), testutil.ToFloat64(c.b); a != b {
				t.Fatalf("seed %d, step %d: %s %v from the whole table, %v from the changed shards", seed, step, c.name, a, b)
			}
		}
	}
	if got := testutil.ToFloat64(incr.m.ownershipChanges); got == 0 {
		t.Fatalf("seed %d: no ownership change observed", seed)
	}
}

// TestMoveLogRing: the move log keeps the newest maxMoves moves, newest
// first, before and after it wraps.
func TestMoveLogRing(t *testing.T) {
	var l moveLog
	for i := range maxMoves + 77 {
		l.add(apitypes.Move{Shard: uint32(i)})
		ms := l.list()
		if want := min(i+1, maxMoves); len(ms) != want {
			t.Fatalf("after %d adds: %d moves, want %d", i+1, len(ms), want)
		}
		for j, m := range ms {
			if m.Shard != uint32(i-j) {
				t.Fatalf("after %d adds: move %d is shard %d, want %d", i+1, j, m.Shard, i-j)
			}
		}
	}
}
