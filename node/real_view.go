// The real backend's read side: shard records, the acting state, the
// control group and lease status, read from the applied ledger state and
// the agent core.

package node

import (
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

func (b *netBackend) incarnation() uint64 { return b.inc }

func (b *netBackend) appliedIndex() uint64 { return b.fsm.State().AppliedIndex() }

func shardInfo(st *ledger.State, r ledger.ShardRecord) ShardInfo {
	return shardInfoValid(st, r, st.OwnershipValid(r))
}

// shardInfoValid is shardInfo with the ownership's validity already
// decided (allShards decides it with each owner's record read once).
func shardInfoValid(st *ledger.State, r ledger.ShardRecord, valid bool) ShardInfo {
	return ShardInfo{
		Shard: r.Shard, Epoch: r.Epoch, Owner: r.Owner, State: r.State, Target: r.Target,
		Valid: valid, ChangedAt: time.Unix(0, r.ChangedAt), Reason: r.Reason, Fenced: st.Fenced(r.Shard),
	}
}

func (b *netBackend) shard(s uint32) (ShardInfo, bool) {
	st := b.fsm.State()
	r, ok := st.Shard(s)
	if !ok {
		return ShardInfo{}, false
	}
	return shardInfo(st, r), true
}

func (b *netBackend) shardsSince(since uint64) (uint64, []ShardInfo, bool) {
	st := b.fsm.State()
	if since != 0 {
		if changed, ok := st.ShardChangesSince(since); ok {
			out := make([]ShardInfo, 0, len(changed))
			for _, s := range changed {
				if r, found := st.Shard(s); found {
					out = append(out, shardInfo(st, r))
				}
			}
			return st.OwnershipGeneration(), out, false
		}
	}
	return st.OwnershipGeneration(), allShards(st), true
}

// shards builds every shard's info from one state.
func (b *netBackend) shards() []ShardInfo { return allShards(b.fsm.State()) }

// allShards builds every shard's info from st. Validity reads the
// owner's node record: looked up once per owner, not once per shard (4,096
// B-tree lookups for a few dozen owners: docs/benchmarks.md, "Scale with
// real agents").
func allShards(st *ledger.State) []ShardInfo {
	out := make([]ShardInfo, 0, st.ShardCount())
	type owner struct {
		rec ledger.NodeRecord
		ok  bool
	}
	owners := make(map[string]owner)
	st.EachShard(func(r ledger.ShardRecord) bool {
		o, seen := owners[r.Owner]
		if !seen {
			o.rec, o.ok = st.Node(r.Owner)
			owners[r.Owner] = o
		}
		out = append(out, shardInfoValid(st, r, ledger.OwnershipValidWith(r, o.rec, o.ok)))
		return true
	})
	return out
}

func (b *netBackend) acting(s uint32, now time.Time) (actingState, bool) {
	if !b.lockFreshAgent(now) {
		return actingState{}, false
	}
	defer b.mu.Unlock()
	a, ok := b.agent.Acting(now, s)
	if !ok {
		return actingState{}, false
	}
	return actingState{epoch: a.Epoch, until: a.Until, revoking: a.Revoking}, true
}

// lockFreshAgent locks b.mu with the agent up to date, and reports false
// (unlocked) once b is closed. The agent must have seen what the replica
// applied, so a shard moved away is never reported acting at its old
// epoch: feed it the latest state first when the replica is ahead (an
// input, like any other).
func (b *netBackend) lockFreshAgent(now time.Time) bool {
	b.mu.Lock()
	stale := !b.closed && b.agent.Status().Applied < b.fsm.State().AppliedIndex()
	b.mu.Unlock()
	if stale {
		b.stepLatest(now)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	return true
}

func (b *netBackend) resigned(s uint32, epoch uint64) {
	b.step(time.Now(), ownership.ShardResigned{Shard: s, Epoch: epoch})
}

func (b *netBackend) draining() bool {
	if b.gossip.Local().Draining {
		return true
	}
	rec, _ := b.fsm.State().Node(b.id)
	return rec.Draining
}

func (b *netBackend) control() controlInfo {
	leader := b.ctl.Leader()
	b.mu.Lock()
	lastAck := b.agent.Status().LastAck
	b.mu.Unlock()
	recent := !lastAck.IsZero() && time.Since(lastAck) < b.timing.Lease
	ci := controlInfo{leader: leader, voters: b.ctl.Voters(), quorum: leader != "" && recent, isLeader: leader == b.id}
	ci.stream = streamStatus(b.ctl, b.fsm.State())
	if h, ok := b.fsm.HaltedAt(); ok {
		ci.halted, ci.haltedAt = h.Error(), h.Index
	}
	return ci
}

func (b *netBackend) lease() leaseInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.agent.Status()
	return leaseInfo{registered: b.registered, leaseEnd: st.LeaseEnd, lastAck: st.LastAck, failing: st.Failing,
		fenced: st.Fenced, conflict: b.conflict, wedgedShards: b.agent.Wedged(time.Now())}
}
