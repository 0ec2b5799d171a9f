package node

import (
	"context"
	"fmt"
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
type StateMachine interface {
	// Apply applies one committed command for shard, proposed by its owner
	// at epoch, at log index. The result is returned to the proposer.
	Apply(shard uint32, epoch uint64, index uint64, payload []byte) ([]byte, error)
	// Snapshot serialises the whole state.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot.
	Restore(snapshot []byte) error
}

// Applied is the outcome of a committed application command.
type Applied struct {
	// Index is the command's log index; every node's state machine has
	// applied it once its replica's applied index reaches Index.
	Index uint64
	// Result is what the state machine's Apply returned on the leader.
	Result []byte
}

// Propose commits an application command of type typ for tok's shard and
// returns once it is applied. It is fenced: the cluster rejects it with
// ErrStaleToken, and no state machine sees it, if the shard has moved past
// tok's epoch — a deposed owner cannot write. ErrUnknownType means no
// state machine is registered for typ; an error returned by the state
// machine's Apply is returned wrapped. ErrNoQuorum means the command could
// not be committed or — when the control group's leader changed while
// committing — that its outcome is unknown: Propose does not retry it,
// because a retry could apply it twice; make commands idempotent (carry an
// id the state machine deduplicates) if you retry.
func (n *Node) Propose(ctx context.Context, tok Token, typ string, payload []byte) (Applied, error) {
	if n.isClosed() {
		return Applied{}, ErrClosed
	}
	if _, ok := n.cfg.StateMachines[typ]; !ok {
		return Applied{}, fmt.Errorf("node: propose %q: %w", typ, ErrUnknownType)
	}
	a, err := n.be.propose(ctx, tok, typ, payload)
	if err != nil {
		return a, fmt.Errorf("node: propose %q with token %s: %w", typ, tok, err)
	}
	return a, nil
}

// AppliedIndex returns the last log index this node's replica applied.
func (n *Node) AppliedIndex() uint64 { return n.be.appliedIndex() }
