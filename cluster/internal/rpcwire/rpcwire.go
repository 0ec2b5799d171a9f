// Package rpcwire holds the wire types of the control group's net/rpc
// service. net/rpc needs them exported; keeping them in an internal package
// keeps them out of the cluster package's API. They are gob-encoded, so
// fields may be added but not renamed or retyped.
package rpcwire

import "time"

// ReplyCode classifies a control RPC outcome.
type ReplyCode uint8

// Reply codes.
const (
	CodeOK             ReplyCode = iota
	CodeNotLeader                // not submitted: the callee is not the leader
	CodeLeadershipLost           // submitted, outcome unknown
	CodeTimeout                  // outcome unknown
	CodeFSMError                 // committed; the FSM returned an error
	CodeClosed                   // the callee is shutting down; not submitted
	CodeBadRequest               // malformed request; not submitted
	CodeError                    // other error (Msg)
	CodeQuorumRisk               // removal refused
	CodeUnknownServer            // removal of an id not in the configuration
	CodeBadResponse              // committed; the FSM response could not be marshalled
	CodeUnauthorized             // the caller may not do this; not submitted
)

// ApplyArgs is the request of Control.Apply.
type ApplyArgs struct {
	Cmd     []byte
	Timeout time.Duration // 0 = the callee's RPCTimeout
}

// ApplyReply is the reply of Control.Apply.
type ApplyReply struct {
	Code     ReplyCode
	Msg      string
	Index    uint64
	Response []byte
}

// StatusArgs is the request of Control.Status.
type StatusArgs struct{}

// StatusReply is the reply of Control.Status: what a peer needs to decide
// about bootstrapping and promotion.
type StatusReply struct {
	ID           string
	Addr         string
	HasState     bool     // has a Raft log or snapshot
	LastIndex    uint64   // last log index
	AppliedIndex uint64   // last applied index
	Term         uint64   // current term
	Bootstrap    []string // the initial voters this node would choose now, sorted
}

// RemoveArgs is the request of Control.Remove.
type RemoveArgs struct {
	ID          string
	Incarnation uint64 // of the leaving node, for Leave
	Leave       bool   // the node itself is leaving (vs an operator action)
}

// RemoveReply is the reply of Control.Remove.
type RemoveReply struct {
	Code ReplyCode
	Msg  string
}
