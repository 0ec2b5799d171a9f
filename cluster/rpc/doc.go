// Package rpc is the connection layer of the control group's port: the
// stream layers (TCP, TLS), the mux that hands every accepted connection to
// Raft or to the RPC server by its first byte, after proving its peer
// (cluster/identity) and within the limits before authentication, and the
// RPC client pool (net/rpc, gob) with its size and time bounds.
//
// It owns the plumbing, not the service: the Control.* handlers are the
// control group's operations (forwarding, renewals, confirms, the
// committed-state stream) and stay in cluster, which registers them on the
// net/rpc server MuxOptions.Server returns. The wire types live in
// cluster/internal/rpcwire.
//
// It must not: import cluster (the dependency points from the group to its
// transport), nor decide anything about ownership.
package rpc
