// Package cluster runs gossip membership (hashicorp/memberlist) and the Raft
// control group (hashicorp/raft) that commits the ledger, plus the RPC used to
// forward proposals to the Raft leader.
//
// It owns: node metadata and its encoding, membership events (coalesced),
// joining and leaving, the in-memory transports used by tests and the
// simulator, forming the control group with bootstrap-expect, and keeping the
// Raft configuration in line with membership.
//
// It must not: decide shard ownership. Gossip is a hint; only entries
// committed through Raft change who owns what.
package cluster
