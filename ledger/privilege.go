package ledger

// VersionLeastPrivilege is the cluster version from which the FSM refuses
// a ClusterConfig whose version no registered node speaks, instead of
// halting on it (issue 25): such a command, once committed, stopped every
// replica at its index for good (a version no binary reads). Before this
// version a replica of the previous release would still halt on it, so the
// FSM keeps halting and only Authorize (on the leader) refuses it. It adds
// no command and no encoding.
const VersionLeastPrivilege uint32 = 5

// spokenMax is the newest cluster version some registered node's binary
// speaks (the active version when no node is registered). It reads
// committed state only, so every replica, of any release, decides the
// same.
func (s *State) spokenMax() uint32 {
	v := uint32(0)
	s.nodes.Ascend(func(n NodeRecord) bool {
		_, hi := n.SpeakRange()
		v = max(v, hi)
		return true
	})
	if v == 0 {
		v = s.ActiveVersion()
	}
	return v
}

// versionUnspoken reports whether no registered node speaks cluster
// version v.
func (s *State) versionUnspoken(v uint32) bool { return v > s.spokenMax() }

// hasClusterConfig reports whether c is or wraps a ClusterConfig.
func hasClusterConfig(c Command) bool {
	switch c := c.(type) {
	case ClusterConfig:
		return true
	case Session:
		return hasClusterConfig(c.Command)
	case Batch:
		for _, sc := range c.Commands {
			if hasClusterConfig(sc) {
				return true
			}
		}
	}
	return false
}

// entrySpoken is spokenMax as of the start of the entry being applied, or
// 0 when the cluster runs below VersionLeastPrivilege (nothing is refused
// for being unspoken). The halt check and the refusal both read it, so a
// heartbeat earlier in the same batch cannot turn a refusal into an apply
// of a version this binary does not read.
func (f *FSM) entrySpokenFor(c Command) uint32 {
	if !f.st.VersionActive(VersionLeastPrivilege) || !hasClusterConfig(c) {
		return 0
	}
	return f.st.spokenMax()
}

// refuseUnspoken is the FSM's half of the rule: from VersionLeastPrivilege
// on, a ClusterConfig above every registered node's newest version is
// refused (the replica goes on), not applied and not halted on.
func refuseUnspoken(c ClusterConfig, spoken uint32) error {
	if spoken != 0 && c.Version > spoken {
		return errf(ErrVersion, "cluster version %d: no registered node speaks it (the newest spoken is %d)", c.Version, spoken)
	}
	return nil
}

// unreadableAt is unreadable for an entry applied with entrySpoken spoken:
// a ClusterConfig the FSM will refuse is not a reason to halt.
func unreadableAt(c Command, spoken, readable uint32) error {
	switch c := c.(type) {
	case ClusterConfig:
		if refuseUnspoken(c, spoken) != nil {
			return nil
		}
	case Session:
		return unreadableAt(c.Command, spoken, readable)
	case Batch:
		for _, sc := range c.Commands {
			if err := unreadableAt(sc, spoken, readable); err != nil {
				return err
			}
		}
		return nil
	}
	return unreadable(c, readable)
}
