package ledger

import (
	"errors"
	"fmt"
)

// ErrUnauthorized: the proposer may not propose this command (see
// Authorize). It is never retried: asking again, or asking another leader,
// gives the same answer.
var ErrUnauthorized = errors.New("ledger: not authorized")

// Proposer is who sends a command to the control-group leader, as the
// control group proved it (the identity in the sender's TLS certificate).
type Proposer struct {
	// ID is the sender's node id, or the operator's name when Operator.
	ID string
	// Operator is set for holders of an operator certificate.
	Operator bool
}

// String names the proposer in errors and logs.
func (p Proposer) String() string {
	if p.Operator {
		return "operator " + p.ID
	}
	return "node " + p.ID
}

// Authorize decides whether p may have the leader propose c. It is the one
// place the rule lives; the leader calls it on every command a peer
// forwards, before the command reaches Raft. The leader's own proposals
// (the reconcile loop's grants, revokes and expiries) are not forwarded and
// not checked. The rule:
//
//   - a member proposes only what concerns itself: its own Heartbeat,
//     ClaimIncarnation and SetDraining, Release and Transfer of shards it owns (From/Owner is
//     itself), JobStart as itself, and JobComplete, JobFail and App fenced
//     with an epoch at which it owns the shard;
//   - any member (or operator) may enqueue a job (members serve the API
//     clients' enqueues) and declare a group election;
//   - Grant, Revoke and ExpireNode come from the leader alone, so a
//     forwarded one is always refused, as is every kind this function does
//     not know (a newer release's command must be added here to be
//     forwardable);
//   - operators may drain any node and change Settings;
//   - any member (or operator) may propose PinShard, ExcludeNode and
//     SetTakeoverPolicy: they reach the leader through a member's HTTP API,
//     which demands an operator's write-scope token (like finalizing an
//     upgrade), or — SetTakeoverPolicy for an election's shard — from the
//     node that declares the election with the fenced option (node/);
//   - once the cluster's configuration is recorded, any member may propose
//     a ClusterConfig (finalizing an upgrade; the FSM checks it);
//   - a Session is judged by the command it wraps.
//
// Epoch checks read st, the leader's applied state: the caller must make sure
// st includes every entry committed when the command arrived (a member can
// only know of a grant once it is committed). A command fenced with an epoch
// older than the shard's current one is let through: the FSM rejects it as
// stale with its usual error. One fenced with an epoch the leader has not
// committed is refused.
func Authorize(st *State, p Proposer, c Command) error {
	if p.ID == "" {
		return fmt.Errorf("%w: anonymous proposer", ErrUnauthorized)
	}
	deny := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s may not propose %s: %s", ErrUnauthorized, p, KindOf(c), fmt.Sprintf(format, args...))
	}
	self := func(field, who string) error {
		if who != p.ID || p.Operator {
			return deny("%s is %q, not itself", field, who)
		}
		return nil
	}
	fenced := func(shard uint32, epoch uint64) error {
		if p.Operator {
			return deny("operators own no shards")
		}
		rec, ok := st.Shard(shard)
		switch {
		case !ok || rec.Epoch < epoch:
			return deny("shard %d has no committed epoch %d", shard, epoch)
		case rec.Epoch == epoch && rec.Owner != p.ID:
			return deny("shard %d at epoch %d belongs to %q", shard, epoch, rec.Owner)
		}
		return nil
	}
	switch c := c.(type) {
	case Heartbeat:
		return self("Node", c.Node)
	case ClaimIncarnation:
		return self("Node", c.Node)
	case SetDraining:
		if p.Operator {
			return nil
		}
		return self("Node", c.Node)
	case Release:
		return self("Owner", c.Owner)
	case Transfer:
		return self("From", c.From)
	case JobEnqueue, DeclareElection, PinShard, ExcludeNode, SetTakeoverPolicy:
		return nil
	case JobStart:
		return self("Owner", c.Owner)
	case JobComplete:
		return fenced(c.Shard, c.Epoch)
	case JobFail:
		return fenced(c.Shard, c.Epoch)
	case App:
		return fenced(c.Shard, c.Epoch)
	case Settings:
		if !p.Operator {
			return deny("operator only")
		}
		return nil
	case ClusterConfig:
		// The leader records the first one. Afterwards a member may ask
		// for a raise (an operator's `tenure upgrade finalize` reaches the
		// leader through a member's API); the FSM keeps name and
		// partitions fixed and the version from going down, and a node
		// that cannot speak the raised version loses its lease (its
		// heartbeats are refused), so a raise never costs safety.
		if st.Cluster().Name == "" && !p.Operator {
			return deny("the leader records the cluster's first configuration")
		}
		return nil
	case Session:
		// A request id changes nothing about who may propose what.
		switch c.Command.(type) {
		case Batch, Session, nil:
			return deny("a session wraps one plain command")
		}
		return Authorize(st, p, c.Command)
	case Batch:
		for i, sub := range c.Commands {
			if err := Authorize(st, p, sub); err != nil {
				return fmt.Errorf("batch entry %d: %w", i, err)
			}
		}
		return nil
	}
	return deny("only the control-group leader proposes it")
}
