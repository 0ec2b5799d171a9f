// Package raftnet holds the Raft transports the control group runs over
// besides raft's own NetworkTransport (which runs on cluster/rpc's mux):
//
//   - WaitingTransport wraps any raft.Transport so that log replication to
//     an unreachable peer waits for it instead of entering raft's growing
//     backoff (wait.go);
//   - MemNetwork is a seeded in-memory network: a raft.Transport and an
//     rpc.StreamLayer per address, with delays, loss, cuts and partitions,
//     for tests and the simulator (memnet.go).
//
// It must not: import cluster, nor decide anything about ownership.
package raftnet
