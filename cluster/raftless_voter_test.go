package cluster

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestVoterNeverDropsRaft: a node the Raft configuration lists as a voter
// keeps its Raft however long no leader contacted it — here the two other
// voters are gone, so it hears from no leader for 20 ElectionTimeouts,
// twice the silence after which a voter-capable node out of the
// configuration drops its Raft (autoDropQuiet). Only voter-capable
// non-standbys out of the configuration follow the stream without Raft
// (mutation.VoterDropsRaft breaks it).
func TestVoterNeverDropsRaft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newStreamHarness(t)
		defer sh.closeAll()
		for _, id := range []string{"n1", "n2", "n3"} {
			sh.start(id)
		}
		sh.waitConfig(30*time.Second, "n1:V n2:V n3:V")
		l := sh.waitLeader(30 * time.Second)
		sh.applyN(l, "a", 3)
		keep := "n1" // a follower: the one that stays
		if l.id == keep {
			keep = "n2"
		}
		for _, id := range []string{"n1", "n2", "n3"} {
			if id != keep {
				sh.stop(id) // a crash: the configuration still lists it
			}
		}
		g := sh.nodes[keep].g
		// The scenario's passage of time (the bubble's clock), not a
		// wait for an outcome.
		time.Sleep(2 * autoDropQuiet * g.cfg.ElectionTimeout)
		g.dropRaft()
		if !g.HasRaft() {
			t.Fatalf("voter %s dropped its Raft after %v without a leader", keep, 2*autoDropQuiet*g.cfg.ElectionTimeout)
		}
		if c, err := g.latestConfiguration(); err != nil || len(c.Servers) != 3 {
			t.Fatalf("configuration after the crashes: %+v (%v)", c, err)
		}
	})
}
