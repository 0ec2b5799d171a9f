// Package ledger is tenure's source of truth: the Raft state machine that
// holds shard ownership epochs, node liveness, jobs and application commands.
// The storage that backs it is ledger/raftstore (raft-boltdb/v2 with fsync,
// file snapshots); group commit is cluster/commit.
//
// It owns: the command encoding (Encode, Decode), the deterministic Apply of
// every command (compare-and-set on epochs, so a retried or stale command can
// never create a second owner), snapshots, and typed read accessors (State)
// safe to call concurrently with Apply.
//
// It must not: read the clock, use randomness or iterate maps in an order
// that reaches state; every timestamp and id travels inside the command. It
// does not decide anything — it only accepts or rejects what is proposed.
//
// Entry points: NewFSM (a raft.FSM and raft.BatchingFSM; ApplyCommand for
// use without raft), FSM.State for reads, FSM.OnApply and FSM.WaitApplied
// for the leader loop and the lease tracker. Each command kind is declared
// once in the registry (registry.go), which every dispatcher reads.
// docs/ledger.md has the command table with every
// accept and reject rule, the wire and snapshot formats, and measurements.
package ledger
