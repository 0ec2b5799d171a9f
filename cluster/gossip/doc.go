// Package gossip runs tenure's gossip membership on hashicorp/memberlist:
// node metadata and its versioned encoding, membership events (coalesced
// into batches), joining, leaving and rejoining, claiming a node id, the
// gossip keyring, and the in-memory network tests and the simulator run
// memberlist on.
//
// It must not: decide shard ownership or membership of the control group.
// Gossip is a hint; only entries committed through Raft (package cluster)
// change who owns what. Package cluster re-exports these names, so callers
// may keep importing cluster.
package gossip
