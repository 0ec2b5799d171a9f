package node

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/ledger"
)

// StateMachine is an application state machine replicated by the cluster
// (Kommander's OnReplicationReceived, done with fencing and snapshots).
// Register it under a command type in Config.StateMachines; every node
// applies every committed command of that type, in log order, exactly once
// per log entry.
//
// Contract (as for any Raft state machine):
//   - Apply must be deterministic: same state and input, same result and
//     new state on every node. Do not read the clock, randomness or map
//     order; put such values in the payload.
//   - Apply must not perform external side effects (it also runs when a
//     node replays its log after a restart); record the decision and let a
//     worker act on it with the command's token.
//   - Apply, Snapshot and Restore are called from one goroutine, never
//     concurrently with each other; readers of the state the machine keeps
//     must synchronise with Apply themselves.
//   - An error from Apply is returned to the proposer as the command's
//     outcome; the entry still counts as applied. Apply must not panic.
//   - Snapshot returns the whole state; Restore replaces the state with a
//     snapshot's. A restarting node restores the last snapshot and applies
//     the log after it.
//
// Apply applies one committed command for shard, proposed by its owner at
// epoch, at log index; its result is returned to the proposer. Snapshot
// serialises the whole state; Restore replaces the state with a snapshot.
// The one definition is ledger.StateMachine, which the ledger calls.
type StateMachine = ledger.StateMachine

// Applied is the outcome of a committed application command.
type Applied struct {
	// Index is the command's log index; every node's state machine has
	// applied it once its replica's applied index reaches Index. For a
	// retry answered from the session table it is the retry's own entry;
	// the command was applied at an earlier one.
	Index uint64
	// Result is what the state machine's Apply returned on the leader (for
	// a retry: on the first try).
	Result []byte
	// RequestID is the id the command carried (WithRequestID, or one the
	// node drew); zero when the cluster does not run version 2 yet and the
	// command carried none. After an ErrNoQuorum, Propose again with
	// WithRequestID(RequestID) to learn the outcome without applying twice.
	RequestID RequestID
	// Replayed: the ledger had already applied this request id; Result is
	// the first application's and nothing was applied now.
	Replayed bool
}

// RequestID identifies one logical command across its retries
// (ledger.RequestID: 16 bytes, e.g. a UUIDv4; the zero id means none).
type RequestID = ledger.RequestID

// NewRequestID returns a random request id.
func NewRequestID() RequestID { return ledger.NewRequestID() }

// ProposeOption configures one Propose.
type ProposeOption func(*proposeOptions)

type proposeOptions struct{ id RequestID }

// WithRequestID makes Propose carry id. The ledger remembers the outcome
// of each id for its session window (docs/guarantees.md, "Retries"): a
// Propose with an id already applied within the window is not applied
// again and returns the first application's result. Use one id per
// logical command, and the same id for every retry of it — also from
// another process, or on another node. The zero id means none.
func WithRequestID(id RequestID) ProposeOption {
	return func(o *proposeOptions) { o.id = id }
}

// Propose commits an application command of type typ for tok's shard and
// returns once it is applied. It is fenced: the cluster rejects it with
// ErrStaleToken, and no state machine sees it, if the shard has moved past
// tok's epoch — a deposed owner cannot write. ErrUnknownType means no
// state machine is registered for typ; an error returned by the state
// machine's Apply is returned wrapped.
//
// Retries (cluster version 2 and later, docs/guarantees.md "Retries"): the
// command carries a request id — the caller's (WithRequestID) or one the
// node draws — and when the control group's leader changes while it
// commits (outcome unknown), Propose retries it until ctx ends; a retry
// that finds the first try applied returns that result. ErrNoQuorum then
// means ctx ended before any try's outcome was known: Propose again with
// WithRequestID(applied.RequestID) within the session window to get the
// outcome, applied exactly once.
//
// Before the cluster runs version 2 (a rolling upgrade from an older
// release not finalized yet) the id is not sent and Propose behaves as
// the older release did: ErrNoQuorum may mean that the outcome is unknown,
// Propose does not retry, and a retry by the caller could apply the
// command twice (Applied.RequestID is zero then).
func (n *Node) Propose(ctx context.Context, tok Token, typ string, payload []byte, opts ...ProposeOption) (Applied, error) {
	if n.isClosed() {
		return Applied{}, ErrClosed
	}
	if _, ok := n.cfg.StateMachines[typ]; !ok {
		return Applied{}, fmt.Errorf("node: propose %q: %w", typ, ErrUnknownType)
	}
	var o proposeOptions
	for _, opt := range opts {
		opt(&o)
	}
	a, err := n.be.propose(ctx, tok, typ, payload, o.id)
	if err != nil {
		return a, fmt.Errorf("node: propose %q with token %s: %w", typ, tok, err)
	}
	return a, nil
}

// AppliedIndex returns the last log index this node's replica applied.
func (n *Node) AppliedIndex() uint64 { return n.be.appliedIndex() }
