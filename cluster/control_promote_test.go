package cluster

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// dispatchHold is a go-metrics sink that, once armed, holds the raft leader
// goroutine in the metric hashicorp/raft emits at the end of dispatchLogs —
// after it woke the replicators for a new entry, before it installs a new
// configuration in its commitment tracker — for hold (virtual time).
type dispatchHold struct {
	gometrics.BlackholeSink
	armed atomic.Bool
	held  atomic.Int32
	hold  time.Duration
}

func (s *dispatchHold) AddSample(key []string, _ float32) {
	if strings.HasSuffix(strings.Join(key, "."), "raft.leader.dispatchLog") && s.armed.CompareAndSwap(true, false) {
		s.held.Add(1)
		time.Sleep(s.hold)
	}
}

func (s *dispatchHold) AddSampleWithLabels(key []string, val float32, _ []gometrics.Label) {
	s.AddSample(key, val)
}

// A promotion whose new voter acknowledged the configuration entry before
// the leader counted it as a voter still commits (waitVoteGained).
//
// The race, forced here: one of three voters is dead, so the replacement's
// promotion needs the leader, the other live voter and the promoted
// non-voter. The leader is held after it sends the entry and before it
// installs the new configuration; the non-voter acknowledges inside that
// window (its match index is dropped: no vote yet), the other voter's link
// is slow so its acknowledgement comes after (counted under the new
// configuration). Two of the three matches the new configuration needs are
// then known, and without another entry the change never commits — the
// timeline of a CI failure of TestControlDeadVoter (2026-11-28), where
// AddVoter was logged at 20.96 s and nothing more happened for 100 s.
func TestPromotionAckRace(t *testing.T) {
	sink := &dispatchHold{hold: 20 * time.Millisecond}
	mcfg := gometrics.DefaultConfig("")
	mcfg.EnableHostname, mcfg.EnableRuntimeMetrics, mcfg.EnableServiceLabel = false, false, false
	if _, err := gometrics.NewGlobal(mcfg, sink); err != nil {
		t.Fatal(err)
	}
	defer gometrics.NewGlobal(gometrics.DefaultConfig(""), &gometrics.BlackholeSink{}) //nolint:errcheck // restores the default
	synctest.Test(t, func(t *testing.T) {
		const timeout = 20 * time.Second
		h := newMemHarness(t, 11)
		h.cfg = func(c *ControlConfig) { c.DeadVoterTimeout = timeout }
		defer h.closeAll()
		for i := 1; i <= 4; i++ {
			h.start(fmt.Sprintf("n%d", i))
		}
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		leader := h.waitLeader(10 * time.Second)
		var victim, slow string
		for _, id := range []string{"n1", "n2", "n3"} {
			switch {
			case id == leader.id:
			case victim == "":
				victim = id
			default:
				slow = id
			}
		}
		var want []string
		for _, id := range []string{"n1", "n2", "n3", "n4"} {
			if id != victim {
				want = append(want, id+":V")
			}
		}
		h.stop(victim)
		h.gossip.state(victim, StateDead, gossip.EventFailed)
		time.Sleep(timeout / 2)
		h.waitConfig(10*time.Second, "n1:V n2:V n3:V n4:N")
		// The slow voter answers after the hold; the non-voter at once.
		h.mem.SetLink(leader.addr, h.nodes[slow].addr, Link{Delay: 2 * sink.hold})
		sink.armed.Store(true)
		h.waitConfig(2*time.Minute, strings.Join(want, " "))
		if sink.held.Load() != 1 {
			t.Fatalf("the leader was held %d times, want 1 (the promotion's entry)", sink.held.Load())
		}
	})
}
