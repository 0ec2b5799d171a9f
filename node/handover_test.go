package node

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"testing"
	"time"
)

// A control-group leader closed gracefully hands leadership to a live
// voter before it stops (cluster.ControlGroup.HandOverLeadership), so the
// group has a leader again without an election timeout; the voter it
// names leads afterwards and the old leader keeps its place as a voter.
func TestCloseHandsLeadershipOver(t *testing.T) {
	logs := &lockedLog{}
	tc := newCluster(t, 3, func(i int, c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", c.NodeID)
	})
	ctx := tc.ctx()
	var leader string
	if !waitTrue(ctx, func() bool { leader = tc.nodes[0].Status().ControlLeader; return leader != "" }) {
		t.Fatal("no control-group leader")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.byID(leader).Close(cctx); err != nil {
		t.Fatalf("close %s: %v", leader, err)
	}
	re := regexp.MustCompile(fmt.Sprintf(`handed control-group leadership over before stopping" node=%s to=(\S+)`, leader))
	m := re.FindStringSubmatch(string(logs.snapshot()))
	if m == nil {
		t.Fatalf("%s closed without handing leadership over; its log:\n%s", leader, logs.tail(40))
	}
	to := m[1]
	for _, n := range tc.others(leader) {
		if !waitTrue(ctx, func() bool { return n.Status().ControlLeader == to }) {
			t.Fatalf("%s sees leader %q, want %s (handed over by %s)", n.ID(), n.Status().ControlLeader, to, leader)
		}
		if v := n.Status().Voters; len(v) != 3 {
			t.Errorf("%s: voters %v after the leader's graceful stop, want all three kept", n.ID(), v)
		}
	}
}

// snapshot returns a copy of everything written so far.
func (l *lockedLog) snapshot() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b...)
}
