package cluster

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// TestControlChaos drives five nodes through a seeded schedule of crashes,
// restarts, isolations, one-way cuts and lossy links while clients apply
// commands through random nodes. Afterwards (faults healed) every node holds
// the same log and every acknowledged command is in it (S3), in the order
// of acknowledgement for commands acknowledged one after another.
func TestControlChaos(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("reproduce with seed %d", seed)
				}
			}()
			synctest.Test(t, func(t *testing.T) { chaos(t, seed) })
		})
	}
}

func chaos(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	h := newMemHarness(t, seed)
	defer h.closeAll()
	ids := []string{"n1", "n2", "n3", "n4", "n5"}
	for _, id := range ids {
		h.start(id)
	}
	h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N n5:N")

	var acked []string
	seq := 0
	for step := range 60 {
		switch r := rng.Intn(10); {
		case r < 2: // crash one node (at most one down at a time)
			if len(h.running()) == len(ids) {
				id := ids[rng.Intn(len(ids))]
				h.stop(id)
				h.gossip.state(id, StateDead, gossip.EventFailed)
			}
		case r < 4: // restart everything that is down
			for _, id := range ids {
				if h.nodes[id].g == nil {
					h.start(id)
				}
			}
		case r < 5:
			h.mem.Isolate(h.nodes[ids[rng.Intn(len(ids))]].addr)
		case r < 6:
			a, b := ids[rng.Intn(len(ids))], ids[rng.Intn(len(ids))]
			if a != b {
				h.mem.Cut(h.nodes[a].addr, h.nodes[b].addr)
			}
		case r < 7:
			h.mem.SetDefaultLink(Link{Delay: time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.05})
		default:
			h.mem.Heal()
			h.mem.SetDefaultLink(Link{})
		}
		// A few client commands through random running nodes; unknown
		// outcomes are fine, acknowledgements are promises.
		for range 3 {
			run := h.running()
			n := run[rng.Intn(len(run))]
			seq++
			cmd := fmt.Sprintf("c%d", seq)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := n.g.Apply(ctx, []byte(cmd))
			cancel()
			if err == nil {
				if string(res.Response) != "ok:"+cmd {
					t.Fatalf("step %d: response %q for %s", step, res.Response, cmd)
				}
				acked = append(acked, cmd)
			}
		}
		time.Sleep(time.Duration(rng.Intn(500)) * time.Millisecond)
	}

	// Heal and restart everything; the group converges.
	h.mem.Heal()
	h.mem.SetDefaultLink(Link{})
	for _, id := range ids {
		if h.nodes[id].g == nil {
			h.start(id)
		}
	}
	leader := h.waitLeader(30 * time.Second)
	h.apply(leader, "final", 30*time.Second)
	var ref []string
	waitFor(t, 30*time.Second, "identical logs on every node", func() bool {
		ref = h.nodes[leader.id].fsm.entries()
		for _, n := range h.running() {
			if !slices.Equal(n.fsm.entries(), ref) {
				return false
			}
		}
		return true
	})
	pos := map[string]int{}
	for i, c := range ref {
		pos[c] = i
	}
	last := -1
	for _, c := range acked {
		p, ok := pos[c]
		if !ok {
			t.Fatalf("acknowledged command %s lost (log %v)", c, ref)
		}
		if p < last {
			t.Fatalf("acknowledged command %s at %d precedes an earlier acknowledgement at %d", c, p, last)
		}
		last = p
	}
	if len(acked) == 0 {
		t.Fatal("no command was acknowledged: the schedule is too harsh to test anything")
	}
	t.Logf("seed %d: %d of %d commands acknowledged, log length %d", seed, len(acked), seq, len(ref))
}
