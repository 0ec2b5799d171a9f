package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A second process started with a live node's id, on other ports and
// another data dir, is refused with ErrDuplicateID naming the first's
// address; the first keeps its incarnation and its shards throughout.
func TestDuplicateIDRefused(t *testing.T) {
	tc := newCluster(t, 2, nil)
	ctx := tc.ctx()
	first := tc.byID("n1")
	other := tc.byID("n2")
	inc := first.Incarnation()
	owned := first.Owned()
	sub := first.Subscribe(1024)
	defer sub.Close()

	ports := freePorts(t, 2)
	cfg := tc.cfgs[0]
	cfg.DataDir = t.TempDir()
	cfg.GossipAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	second, err := Start(sctx, cfg)
	if err == nil {
		_ = second.Close(context.Background())
		t.Fatal("a second process with n1's id joined")
	}
	if !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("Start = %v, want ErrDuplicateID", err)
	}
	if !strings.Contains(err.Error(), tc.cfgs[0].GossipAddr) {
		t.Fatalf("error %q does not name the running process's address %s", err, tc.cfgs[0].GossipAddr)
	}

	// The first is untouched: same incarnation, still acting on the same
	// shards, and n2 still sees it (not the refused process) as n1.
	if first.Incarnation() != inc {
		t.Fatalf("n1's incarnation moved from %d to %d", inc, first.Incarnation())
	}
	// Same shards at the same epochs. On a loaded machine n1's lease may
	// lapse for a moment (a leader change in the two live voters, CI) and
	// it stops acting until its next renewal: wait for it, with a deadline;
	// a shard taken from it would come back at a higher epoch, or not at all.
	var got []Token
	if !waitTrue(ctx, func() bool { got = first.Owned(); return fmt.Sprint(got) == fmt.Sprint(owned) }) {
		t.Fatalf("n1 owned %v before, %v after", owned, got)
	}
	for _, m := range other.Members() {
		if m.ID == "n1" && (m.Addr != tc.cfgs[0].GossipAddr || m.Incarnation != inc || !m.Live) {
			t.Fatalf("n2 sees n1 as %+v", m)
		}
	}
	for {
		select {
		case ev := <-sub.C():
			if ev.Kind == ShardLost {
				t.Fatalf("n1 lost shard %d while the duplicate was refused", ev.Shard)
			}
			continue
		default:
		}
		break
	}
}

// A crash and restart on the same data dir is not a clash, whether the
// process comes back at its old gossip address (its earlier instance still
// alive in gossip) or at a new one (the earlier instance does not answer).
func TestCrashRestartIsNotDuplicate(t *testing.T) {
	tc := newCluster(t, 2, nil)
	for round, newAddr := range []bool{false, true} {
		n1 := tc.byID("n1")
		inc := n1.Incarnation()
		n1.kill()
		if newAddr {
			// A new gossip address (Raft keeps its own: moving a voter's
			// Raft address is another matter).
			tc.cfgs[0].GossipAddr = fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
		}
		restarted, err := tc.start(0)
		tc.nodes[0] = restarted
		if err != nil {
			t.Fatalf("round %d (new address %v): restart after a crash refused: %v", round, newAddr, err)
		}
		if restarted.Incarnation() != inc+1 {
			t.Fatalf("restarted incarnation %d, want %d", restarted.Incarnation(), inc+1)
		}
	}
}
