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
	CodeUnsupported              // the callee does not offer this call (now)
	CodeRefused                  // a renewal refused by the planner (Refusal names why)
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
	// Leader is the server this node follows at Term ("" if none). A
	// release before it sends none (gob drops unknown fields both ways):
	// the Raft guard's vouch round then learns nothing (raftvouch.go).
	Leader string
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

// ConfirmArgs is the request of Control.Confirm: the leader of Term asks a
// voter to confirm that it still follows it.
type ConfirmArgs struct {
	Term   uint64
	Leader string // the sender's node id
}

// ConfirmReply is the reply of Control.Confirm.
type ConfirmReply struct {
	Code ReplyCode
	Msg  string
	Yes  bool // the voter's term is Term and it follows Leader
}

// ConfirmAgeArgs is the request of Control.ConfirmAge from the new leader
// of Term.
type ConfirmAgeArgs struct {
	Term uint64
}

// ConfirmAgeReply is the reply of Control.ConfirmAge: how long ago (the
// voter's monotonic clock) it recorded its newest Confirm of a term < Term.
type ConfirmAgeReply struct {
	Code ReplyCode
	Msg  string
	Age  time.Duration
}

// RenewArgs is the request of Control.Renew: a member renews its own lease.
type RenewArgs struct {
	Node        string
	Incarnation uint64
	Liveness    uint64
	Timeout     time.Duration // 0 = the callee's RPCTimeout
}

// RenewReply is the reply of Control.Renew.
type RenewReply struct {
	Code        ReplyCode
	Msg         string
	Refusal     string // with CodeRefused: the refusal's stable name
	CommitIndex uint64 // the leader's last log index read after receipt
	Record      []byte // the leader's record of the node (encoded by the caller's layer)
}

// ReadIndexArgs is the request of Control.ReadIndex (cluster version 5): a
// node asks the leader for a read barrier.
type ReadIndexArgs struct {
	Timeout time.Duration // 0 = the callee's RPCTimeout
}

// ReadIndexReply is the reply of Control.ReadIndex.
type ReadIndexReply struct {
	Code  ReplyCode
	Msg   string
	Index uint64 // the leader's last log index read after receipt, confirmed by a quorum round
}
