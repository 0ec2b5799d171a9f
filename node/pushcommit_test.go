package node

import (
	"errors"
	"testing"

	"github.com/tenurehq/tenure/ledger"
)

// Only an applied Grant or Transfer makes the leader push the commit index
// (cluster.ControlGroup.PushCommit): a refused one changed nothing, and
// other commands have no new owner waiting to apply them.
func TestHandsOver(t *testing.T) {
	refused := ledger.Result{Err: errors.New("stale epoch")}
	for _, tc := range []struct {
		c    ledger.Command
		r    ledger.Result
		want bool
	}{
		{ledger.Grant{Shard: 1, Owner: "n2"}, ledger.Result{}, true},
		{ledger.Transfer{Shard: 1, From: "n1", To: "n2"}, ledger.Result{}, true},
		{ledger.Grant{Shard: 1, Owner: "n2"}, refused, false},
		{ledger.Transfer{Shard: 1, From: "n1", To: "n2"}, refused, false},
		{ledger.Release{Shard: 1, Owner: "n1"}, ledger.Result{}, false},
		{ledger.Revoke{Shard: 1, Target: "n2"}, ledger.Result{}, false},
		{ledger.Heartbeat{Node: "n1"}, ledger.Result{}, false},
	} {
		if got := handsOver(tc.c, tc.r); got != tc.want {
			t.Errorf("handsOver(%T, err %v) = %v, want %v", tc.c, tc.r.Err, got, tc.want)
		}
	}
}
