package cluster

import "github.com/tenurehq/tenure/cluster/raftnet"

// This file is the facade of the Raft transports in cluster/raftnet: the
// seeded in-memory network the tests and the simulator run Raft and the RPC
// over. The names the rest of the module imports from cluster stay here as
// aliases of the one definition there.

// In-memory Raft network types.
type (
	// RaftMemNetwork is raftnet.MemNetwork.
	RaftMemNetwork = raftnet.MemNetwork
	// MemRaftTransport is raftnet.MemTransport.
	MemRaftTransport = raftnet.MemTransport
	// Link is raftnet.Link.
	Link = raftnet.Link
)

// NewRaftMemNetwork is raftnet.NewMemNetwork.
func NewRaftMemNetwork(seed int64) *RaftMemNetwork { return raftnet.NewMemNetwork(seed) }
