package cluster

import (
	"context"
	"crypto/tls"

	"github.com/tenurehq/tenure/cluster/rpc"
)

// This file is the facade of the port's connection layer, which lives in
// cluster/rpc: stream layers, the mux, the RPC client pool and their
// limits. The names the rest of the module imports from cluster stay here
// as aliases of the one definition there.

// StreamLayer is rpc.StreamLayer: the connection layer shared by Raft and
// the control RPC.
type StreamLayer = rpc.StreamLayer

// NewTCPStreamLayer is rpc.NewTCPStreamLayer.
func NewTCPStreamLayer(bindAddr, advertiseAddr string) (StreamLayer, error) {
	return rpc.NewTCPStreamLayer(bindAddr, advertiseAddr)
}

// NewTLSStreamLayer is rpc.NewTLSStreamLayer.
func NewTLSStreamLayer(inner StreamLayer, server, client *tls.Config) StreamLayer {
	return rpc.NewTLSStreamLayer(inner, server, client)
}

// rpcPool is the group's handle on an rpc.Pool: one net/rpc client per
// peer address.
type rpcPool struct{ p *rpc.Pool }

func newRPCPool(stream StreamLayer, maxMessage int) *rpcPool {
	return &rpcPool{p: rpc.NewPool(stream, maxMessage)}
}

// call performs one RPC bounded by ctx (rpc.Pool.Call): a *rpc.DialError
// means the request was never sent, a context error that the outcome is
// unknown.
func (p *rpcPool) call(ctx context.Context, addr, method string, args, reply any) error {
	return p.p.Call(ctx, addr, method, args, reply)
}

func (p *rpcPool) close() { p.p.Close() }

// RaftRefused is how many Raft connections or messages this node refused
// since it started: a certificate that is not a node's on the first Raft
// byte, or a message the Raft guard refused (identity/raftguard.go). The same count
// goes to go-metrics as cluster.raft.refused{reason} (Prometheus:
// tenure_cluster_raft_refused_total through httpapi.BridgeGoMetrics).
func (g *ControlGroup) RaftRefused() uint64 { return g.mux.Guard().Refused() }
