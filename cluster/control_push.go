package cluster

// Pushing the commit index to the followers at once (PushCommit).

import "github.com/hashicorp/raft"

// PushCommit makes the followers learn the leader's current commit index
// now instead of at Raft's next commit tick. hashicorp/raft's heartbeats
// carry no commit index: a follower learns that an entry committed with
// the next AppendEntries that carries entries, or, when no more entries
// flow, from the replication loop's idle send every CommitTimeout to
// 2·CommitTimeout (50–100 ms with DefaultControlConfig). A command whose
// effect another node waits for — a shard handed to a new owner — would
// sit committed but unapplied on that node for that long.
//
// PushCommit appends one Raft Barrier entry (raft.LogBarrier: a standard
// entry this group already appends once per term, which the FSM never
// sees, so no log or wire change); replicating it carries the new commit
// index. Leader only: elsewhere it does nothing. It never blocks: calls
// while a push is in flight are coalesced into one more push after it, so
// at most one Barrier is outstanding. Each push costs one fsync'd entry
// on every voter; call it for the rare commands that hand work over, not
// for every command.
func (g *ControlGroup) PushCommit() {
	signal(g.pushSig)
}

// pushLoop serves PushCommit.
func (g *ControlGroup) pushLoop() {
	for {
		select {
		case <-g.pushSig:
		case <-g.closing:
			return
		}
		if g.raft.State() != raft.Leader {
			continue
		}
		// The Barrier is appended after every entry committed so far, so
		// its replication carries their commit. Waiting for it (bounded by
		// one election's worth of time) keeps one push in flight; pushes
		// asked for meanwhile run next, once.
		err := g.wait(g.raft.Barrier(g.cfg.HeartbeatTimeout + g.cfg.ElectionTimeout))
		if err != nil && g.raft.State() == raft.Leader {
			g.log.Debug("cluster: commit push failed", "err", err)
		}
	}
}
