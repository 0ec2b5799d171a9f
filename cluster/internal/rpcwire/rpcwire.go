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
	CodeOK              ReplyCode = iota
	CodeNotLeader                 // not submitted: the callee is not the leader
	CodeLeadershipLost            // submitted, outcome unknown
	CodeTimeout                   // outcome unknown
	CodeFSMError                  // committed; the FSM returned an error
	CodeClosed                    // the callee is shutting down; not submitted
	CodeBadRequest                // malformed request; not submitted
	CodeError                     // other error (Msg)
	CodeQuorumRisk                // removal refused
	CodeUnknownServer             // removal of an id not in the configuration
	CodeBadResponse               // committed; the FSM response could not be marshalled
	CodeUnauthorized              // the caller may not do this; not submitted
	CodeUnsupported               // the callee does not offer this call (now)
	CodeRefused                   // a renewal refused by the planner (Refusal names why)
	CodeStreamReset               // the snapshot being read is gone: subscribe again from the applied index
	CodeStreamNotActive           // the cluster version does not have members on the stream yet: be a Raft non-voter
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

// SubscribeArgs is the request of Control.Subscribe (the committed-state
// stream, cluster version 5): a member asks a voter for every entry its
// state machine applied after From, in log order.
type SubscribeArgs struct {
	// From is the stream index the subscriber has applied: the index of
	// the last entry it applied, or of the snapshot it restored.
	From uint64
	// SnapID and Offset continue a snapshot transfer (SnapID 0: none).
	SnapID uint64
	Offset int64
	// Wait is how long the server may hold the call while it has nothing
	// new (capped by the server).
	Wait time.Duration
	// MaxBytes bounds the entries' data in the reply (capped by the server).
	MaxBytes int
	// Leader is the leader the subscriber knows ("" none): a server that
	// knows another answers at once instead of holding the call.
	Leader string
}

// StreamEntry is one entry a voter's state machine applied: a raft log
// entry (command or configuration) and the stream index before it.
type StreamEntry struct {
	Index      uint64
	Prev       uint64 // the index of the entry applied before it (or of the snapshot)
	Term       uint64
	Type       uint8 // raft.LogType
	Data       []byte
	AppendedAt int64 // unix ns, 0 = unknown
}

// SubscribeReply is the reply of Control.Subscribe: entries after From, or
// one chunk of a snapshot (when From is older than the server's buffer),
// and the server's view of the log so the subscriber knows its lag.
type SubscribeReply struct {
	Code    ReplyCode
	Msg     string
	Entries []StreamEntry

	// A snapshot chunk: the state machine at stream index SnapIndex,
	// SnapTotal bytes, this chunk at Offset.
	SnapID    uint64
	SnapIndex uint64
	SnapTotal int64
	Offset    int64
	Chunk     []byte

	// The server's view: its applied stream index, its commit index, its
	// term, the leader it follows and the voters it knows (id and address,
	// sorted by id).
	Applied    uint64
	Commit     uint64
	Term       uint64
	Leader     string
	LeaderAddr string
	Voters     []string
	VoterAddrs []string
}

// WordsArgs is the request of Control.Words (cluster version 6): a node
// asks the leader for the words of old owners relayed to it (a long poll).
type WordsArgs struct {
	Node    string
	Timeout time.Duration // 0 = the callee's RPCTimeout
}

// WordsReply is the reply of Control.Words.
type WordsReply struct {
	Code ReplyCode
	Msg  string
	Data []byte // the words (encoded by the caller's layer)
}

// OwnerWordArgs is the request of Control.OwnerWord (cluster version 6):
// an old owner's Transfers (an encoded ledger command), told to the leader
// as its word at once, ahead of their commit.
type OwnerWordArgs struct {
	Cmd []byte
}

// OwnerWordReply is the reply of Control.OwnerWord.
type OwnerWordReply struct {
	Code ReplyCode
	Msg  string
}
