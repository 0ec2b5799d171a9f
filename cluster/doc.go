// Package cluster runs the Raft control group (hashicorp/raft) that commits
// the ledger — forming it with bootstrap-expect, keeping the Raft
// configuration in line with membership, forwarding proposals to the
// leader, serving the committed-state stream — and is the facade the rest
// of tenure imports for its concerns, each in its own package:
//
//   - cluster/gossip: gossip membership (hashicorp/memberlist), node metadata
//     and its encoding, membership events, the keyring, the in-memory gossip
//     network; re-exported in gossip.go.
//   - cluster/identity: this node's id and incarnation on disk, the roles a
//     peer's certificate proves, the deny-list check, the Raft message
//     guard; re-exported in identity_facade.go.
//   - cluster/rpc: the port's connection layer: stream layers, the mux
//     (Raft or RPC by the first byte, after authentication and within the
//     limits before it), the RPC client pool; re-exported in rpc_facade.go.
//   - cluster/raftnet: Raft transports: replication that waits for an
//     unreachable peer, the seeded in-memory network; re-exported in
//     raftnet_facade.go.
//   - cluster/commit: group commit (Batcher, Applier).
//   - cluster/internal/logadapt: raft's and memberlist's logs as slog records.
//   - cluster/internal/atomicfile: durable replacement of small state files.
//   - cluster/internal/rpcwire: the RPC wire types.
//
// The Control.* RPC handlers stay here, next to the operations they serve
// (rpc_service.go, control_renew.go, control_confirm.go,
// control_readindex.go, stream.go): cluster/rpc carries them without
// importing cluster.
//
// It must not: decide shard ownership. Gossip is a hint; only entries
// committed through Raft change who owns what.
package cluster
