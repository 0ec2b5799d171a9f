package cluster

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// ReadIndex through a follower and on the leader answers an index at or
// above every command acknowledged before the call; a leader cut off from
// the other voters answers none (its confirm round fails), so a read
// barrier never lets a deposed leader's stale index through.
func TestReadIndex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := renewHarness(t, 3)
		defer h.closeAll()
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V")
		l := h.waitLeader(10 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		acked := h.apply(l, "cmd-1", 5*time.Second)
		var f *testNode
		var others []string
		for _, n := range h.running() {
			if n != l {
				f = n
				others = append(others, n.addr)
			}
		}
		waitFor(t, 5*time.Second, "follower knows the leader", func() bool {
			id, _ := f.g.Leader()
			return id == l.id
		})
		for name, n := range map[string]*testNode{"follower": f, "leader": l} {
			idx, err := n.g.ReadIndex(ctx)
			if err != nil || idx < acked.Index || idx > l.g.LastIndex() {
				t.Fatalf("%s: read index %d, %v; want within [%d, %d]", name, idx, err, acked.Index, l.g.LastIndex())
			}
		}
		h.mem.Partition([]string{l.addr}, others)
		synctest.Wait()
		if idx, err := l.g.ReadIndex(ctx); err == nil {
			t.Fatalf("a leader cut off from the voters answered read index %d", idx)
		}
	})
}
