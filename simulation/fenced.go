package simulation

import "github.com/tenurehq/tenure/ledger"

// Fenced takeover in the simulator (Config.Fenced): the setup commits and
// the checker's S4 waiver.

// fencedSetup commits, before any node starts, what an operator would to
// opt Config.Fenced into fenced takeover: the cluster version that has it,
// then the policy. Nothing is committed without Config.Fenced, so other
// runs are unchanged.
func (s *Sim) fencedSetup() {
	if len(s.cfg.Fenced) == 0 {
		return
	}
	cmds := []ledger.Command{ledger.ClusterConfig{Name: "sim", Partitions: uint32(s.cfg.Ownership.Ring.Partitions),
		Version: ledger.VersionFencedTakeover}}
	for _, r := range s.cfg.Fenced {
		cmds = append(cmds, ledger.SetTakeoverPolicy{First: r.First, Last: r.Last, Fenced: true})
	}
	for _, c := range cmds {
		if res, _ := s.raft.commit(c, 0); res.Err != nil {
			s.violate("setup", "%s: %v", ledger.KindOf(c), res.Err)
		}
	}
}

// s4Waived reports whether S4 (no two owners act at once) is waived for
// shard: it is under fenced takeover in the committed log. S2 is not
// waived: the history checker holds every fenced command to the shard's
// current epoch, and a stale owner's commands are refused.
func (c *checker) s4Waived(shard uint32) bool {
	return c.s.raft.ref.State().Fenced(shard)
}
