// Package cluster runs the Raft control group (hashicorp/raft) that commits
// the ledger, plus the RPC used to forward proposals to the Raft leader, and
// is the facade the rest of tenure imports for its concerns:
//
//   - cluster/gossip: gossip membership (hashicorp/memberlist), node metadata
//     and its encoding, membership events, the keyring, the in-memory gossip
//     network; cluster re-exports its names (gossip.go).
//   - cluster/internal/logadapt: raft's and memberlist's logs as slog records.
//   - cluster/internal/atomicfile: durable replacement of small state files.
//   - cluster/internal/rpcwire: the RPC wire types.
//
// It owns: forming the control group with bootstrap-expect, and keeping the
// Raft configuration in line with membership.
//
// It must not: decide shard ownership. Gossip is a hint; only entries
// committed through Raft change who owns what.
package cluster
