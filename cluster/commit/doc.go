// Package commit is the path a command takes into the Raft log: Batcher
// groups concurrent commands into one Batch entry (group commit) and hands
// each caller its own ledger.Result; an Applier commits one encoded entry —
// RaftApplier on the leader, or the node's forwarder to it. An enqueue goes
// node → commit.Batcher → cluster (forward or raft.Apply) → ledger.FSM.
package commit
