package cluster

import "github.com/tenurehq/tenure/cluster/rpc"

// The port's wire constants and pool timings, as the tests here use them
// (cluster/rpc defines them).
const (
	protoRaft      = rpc.ProtoRaft
	protoRPC       = rpc.ProtoRPC
	rpcDialTimeout = rpc.DialTimeout
	rpcSilentDrop  = rpc.SilentDrop
)
