package httpapi

import (
	"testing"

	"github.com/tenurehq/tenure/httpapi/apitypes"
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
	}
	for _, c := range []struct {
		prev, owner, want string
	}{
		{"", "", "unowned"}, {"a", "", "a released it"}, {"", "a", "first owner"}, {"a", "a", "re-granted to a"},
		{"z", "a", "z unknown"}, {"b", "a", "b dead"}, {"c", "a", "c lease expired"}, {"d", "a", "d draining"},
		{"e", "a", "e unhealthy"}, {"a", "d", "rebalance"},
	} {
		if got := moveCause(OwnershipEvent{Previous: c.prev, Owner: c.owner}, members); got != c.want {
			t.Errorf("%q→%q: %q, want %q", c.prev, c.owner, got, c.want)
		}
	}
}
