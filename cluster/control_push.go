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
// PushCommit appends ControlConfig.PushCommand, a command the FSM applies
// as a no-op; replicating it carries the new commit index. (Not a Raft
// Barrier: the FSM never sees a LogBarrier entry, so a replica's applied
// index would stay below the log's last index until the next command, and
// anything that waits for the replica to apply the leader's last index —
// a lease renewal's acknowledgement — would wait with it.) Leader only,
// and only with a PushCommand: elsewhere it does nothing. It never blocks:
// calls while a push is in flight are coalesced into one more push after
// it, so at most one is outstanding. Each push costs one fsync'd entry on
// every voter; call it for the rare commands that hand work over, not for
// every command.
func (g *ControlGroup) PushCommit() {
	if len(g.cfg.PushCommand) > 0 {
		signal(g.pushSig)
	}
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
		// The entry is appended after every entry committed so far, so
		// its replication carries their commit. Waiting for it keeps one
		// push in flight; pushes asked for meanwhile run next, once.
		err := g.wait(g.raft.Apply(g.cfg.PushCommand, g.cfg.HeartbeatTimeout+g.cfg.ElectionTimeout))
		if err != nil && g.raft.State() == raft.Leader {
			g.log.Debug("cluster: commit push failed", "err", err)
		}
	}
}
