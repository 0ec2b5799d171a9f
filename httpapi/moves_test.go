package httpapi

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

func TestMoveLogBounded(t *testing.T) {
	var l moveLog
	for i := range maxMoves + 10 {
		l.add(apitypes.Move{Shard: uint32(i)})
	}
	got := l.list()
	if len(got) != maxMoves || got[0].Shard != maxMoves+9 || got[len(got)-1].Shard != 10 {
		t.Fatalf("len %d first %d last %d", len(got), got[0].Shard, got[len(got)-1].Shard)
	}
}

func TestMoveCause(t *testing.T) {
	members := map[string]apitypes.Member{
		"a": {ID: "a", State: "alive", Live: true, Health: 1},
		"b": {ID: "b", State: "dead", Health: 1},
		"c": {ID: "c", State: "alive", Live: false, Health: 1},
		"d": {ID: "d", State: "alive", Live: true, Draining: true, Health: 1},
		"e": {ID: "e", State: "alive", Live: true, Health: 0.1},
		"x": {ID: "x", State: "alive", Live: true, Health: 1, Excluded: true},
	}
	for _, c := range []struct {
		prev, owner, reason, want string
	}{
		{"", "", "", "unowned"}, {"a", "", "release", "a released it"}, {"c", "", "grant", "c lease expired"},
		{"b", "", "", "b dead"}, {"", "a", "unowned", "first owner"}, {"a", "a", "", "re-granted to a"},
		{"z", "a", "", "z left"}, {"b", "a", "", "b dead"}, {"c", "a", "", "c lease expired"}, {"d", "a", "", "drain of d"},
		{"e", "a", "", "e unhealthy"}, {"a", "d", "", "rebalance"},
		// The ledger's reasons win over membership.
		{"a", "e", "owner a expired", "a lease expired"}, {"b", "a", "owner b expired", "b lease expired"},
		{"a", "e", "owner a restarted", "a restarted"}, {"d", "a", "handoff", "drain of d"},
		{"a", "e", "handoff", "rebalance"}, {"c", "a", "takeover from c", "c lease expired"},
		// A handoff carries its revocation's reason: operator rules show.
		{"a", "e", "handoff: pinned to e", "pinned to e"}, {"a", "e", "handoff: a excluded", "a excluded"},
		{"a", "e", "handoff: drain a", "drain of a"}, {"a", "e", "handoff: rebalance to e", "rebalance"},
		{"x", "a", "", "x excluded"}, {"a", "e", "handoff: load to e (a at 2.62× its share)", "load balance"},
	} {
		if got := moveCause(c.prev, c.owner, c.reason, members); got != c.want {
			t.Errorf("%q→%q (%s): %q, want %q", c.prev, c.owner, c.reason, got, c.want)
		}
	}
}

// A failover is two events — n5's lease lapses, then the grant to n3 —
// and the grant is the move from n5, caused by n5's lease, not "first
// owner".
func TestMoveTrackerFailover(t *testing.T) {
	members := map[string]apitypes.Member{
		"n5": {ID: "n5", State: "suspect", Live: false, Health: 1},
		"n3": {ID: "n3", State: "alive", Live: true, Health: 1},
		"n4": {ID: "n4", State: "alive", Live: true, Draining: true, Health: 1},
	}
	var mt moveTracker
	first := mt.move(OwnershipEvent{Shard: 7, Epoch: 1, Owner: "n5"}, "unowned", members)
	if first.Cause != "first owner" || first.From != "" {
		t.Fatalf("first grant: %+v", first)
	}
	lapse := mt.move(OwnershipEvent{Shard: 7, Epoch: 1, Previous: "n5"}, "unowned", members)
	if lapse.Cause != "n5 lease expired" {
		t.Fatalf("lapse: %+v", lapse)
	}
	grant := mt.move(OwnershipEvent{Shard: 7, Epoch: 2, Owner: "n3"}, "owner n5 expired", members)
	if grant.From != "n5" || grant.To != "n3" || grant.Cause != "n5 lease expired" {
		t.Fatalf("failover grant: %+v", grant)
	}
	drain := mt.move(OwnershipEvent{Shard: 8, Epoch: 3, Owner: "n3", Previous: "n4"}, "handoff", members)
	if drain.Cause != "drain of n4" {
		t.Fatalf("drain: %+v", drain)
	}
}

// A killed node is suspected as soon as its heartbeats stop, while gossip
// still calls it alive and the control group still counts it live.
func TestMemberSuspectedAtOnce(t *testing.T) {
	tm := node.Timing{Lease: time.Second, RenewEvery: 200 * time.Millisecond}
	now := time.Unix(1000, 0)
	m := node.Member{ID: "n5", Addr: "127.0.0.1:7946", State: node.MemberAlive, Live: true, Health: 1, UpdatedAt: now.Add(-150 * time.Millisecond)}
	got := memberFrom(m, tm, now)
	if got.Suspected || got.LeaseRemainingMS != 850 || got.LastHeartbeat == nil {
		t.Fatalf("heartbeating: %+v", got)
	}
	m.UpdatedAt = now.Add(-600 * time.Millisecond)
	if got := memberFrom(m, tm, now); !got.Suspected || got.State != "alive" || got.LeaseRemainingMS != 400 {
		t.Fatalf("heartbeats stopped: %+v", got)
	}
	m.UpdatedAt = now.Add(-3 * time.Second)
	if got := memberFrom(m, tm, now); !got.Suspected || got.LeaseRemainingMS != 0 {
		t.Fatalf("lease over: %+v", got)
	}
	m.UpdatedAt, m.State = now, node.MemberSuspect
	if got := memberFrom(m, tm, now); !got.Suspected {
		t.Fatalf("gossip suspects it: %+v", got)
	}
}
