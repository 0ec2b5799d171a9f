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
// control group proved it (the identity and role in the sender's TLS
// certificate).
type Proposer struct {
	// ID is the sender's node id, or the operator's name when Operator.
	ID string
	// Operator is set for holders of an operator certificate.
	Operator bool
	// Voter is set for a voter-capable node certificate (certs.RoleNode):
	// such a node may propose operator actions, which its HTTP API sends
	// for an admin-scope request (a voter can lead Raft anyway, so this
	// grants it nothing it could not take). A member certificate
	// (certs.RoleMember, `--voter=never`) leaves it unset: a member
	// proposes only commands about itself, and its API refuses admin
	// requests with the leader's ErrUnauthorized, naming a voter's API or
	// an operator certificate as the way.
	Voter bool
}

// String names the proposer in errors and logs.
func (p Proposer) String() string {
	switch {
	case p.Operator:
		return "operator " + p.ID
	case p.Voter:
		return "voter-capable node " + p.ID
	}
	return "member " + p.ID
}

// Who may propose a command kind: the rows of the table in
// docs/security.md. The strings are the table's "who may propose it"
// column (TestAuthorizeTable compares them with the page).
const (
	whoLeader   = "the control-group leader only (a forwarded one is refused)"
	whoSelf     = "the node itself (its own id in the command)"
	whoSelfOrOp = "the node itself; operators and voter-capable nodes for any node"
	whoOwner    = "the shard's owner, fenced with an epoch at which it owns the shard"
	whoAnyone   = "any member, voter-capable node or operator"
	whoOperator = "operators and voter-capable nodes (an admin request), never a member"
	whoWrapped  = "whoever may propose every command it wraps"
)

// authz carries one Authorize call's state to the rules.
type authz struct {
	st *State
	p  Proposer
	c  Command
}

func (a authz) deny(format string, args ...any) error {
	return fmt.Errorf("%w: %s may not propose %s: %s", ErrUnauthorized, a.p, KindOf(a.c), fmt.Sprintf(format, args...))
}

// self allows the node named in field (its value who) only.
func (a authz) self(field, who string) error {
	if who != a.p.ID || a.p.Operator {
		return a.deny("%s is %q, not itself", field, who)
	}
	return nil
}

// operator allows operators and voter-capable nodes.
func (a authz) operator() error {
	if a.p.Operator || a.p.Voter {
		return nil
	}
	return a.deny("operator action: it needs an operator certificate, or an admin request to a voter-capable node's API (a member certificate cannot)")
}

// fenced allows the owner of shard at epoch. An epoch older than the
// shard's current one is let through: the FSM rejects it as stale with its
// usual error. One the leader has not committed is refused.
func (a authz) fenced(shard uint32, epoch uint64) error {
	if a.p.Operator {
		return a.deny("operators own no shards")
	}
	rec, ok := a.st.Shard(shard)
	switch {
	case !ok || rec.Epoch < epoch:
		return a.deny("shard %d has no committed epoch %d", shard, epoch)
	case rec.Epoch == epoch && rec.Owner != a.p.ID:
		return a.deny("shard %d at epoch %d belongs to %q", shard, epoch, rec.Owner)
	}
	return nil
}

// operatorOnly allows operators and voter-capable nodes (an operator
// action's check).
func operatorOnly[C Command](a authz, _ C) error { return a.operator() }

// anyone allows every proposer.
func anyone[C Command](authz, C) error { return nil }

// authorizeClusterConfig: an operator action, and never a version the
// cluster cannot run. The leader records the first configuration itself
// (ownership.Planner); afterwards a raise finalizes an upgrade
// (`tenure upgrade finalize`). The version must be one this leader's
// binary reads and one some registered node speaks: a version no replica
// reads (Version 2^31) would halt every replica at that index for good.
// The FSM refuses the same from VersionLeastPrivilege on (versionUnspoken).
func authorizeClusterConfig(a authz, cc ClusterConfig) error {
	if err := a.operator(); err != nil {
		return err
	}
	if a.st.Cluster().Name == "" && !a.p.Operator {
		return a.deny("the leader records the cluster's first configuration")
	}
	if cc.Version > MaxClusterVersion {
		return a.deny("cluster version %d: the leader speaks %d to %d, and a version no replica reads halts them all",
			cc.Version, MinClusterVersion, MaxClusterVersion)
	}
	if a.st.versionUnspoken(cc.Version) {
		return a.deny("cluster version %d: no registered node speaks it", cc.Version)
	}
	return nil
}

// WhoMayPropose returns the "who may propose it" rule of kind k as
// docs/security.md words it, and false for a kind Authorize does not know.
func WhoMayPropose(k Kind) (string, bool) {
	if e := kinds[k]; e != nil {
		return e.who, true
	}
	return "", false
}

// Authorize decides whether p may have the leader propose c. It is the one
// place the rule lives (each kind's declaration names who and its check,
// registry.go; the table in docs/security.md); the leader calls it on every command a peer
// forwards, before the command reaches Raft. The leader's own proposals
// (the reconcile loop's grants, revokes, expiries, forgets and
// configuration) are not forwarded and not checked. In short:
//
//   - a member proposes only what concerns itself: its own Heartbeat,
//     ClaimIncarnation and SetDraining, Release and Transfer of shards it
//     owns (From/Owner is itself), JobStart as itself at an epoch it owns,
//     and JobComplete, JobFail and App fenced with an epoch at which it
//     owns the shard;
//   - anyone may enqueue a job (members serve the API clients' enqueues)
//     and declare a group election;
//   - operator actions — PinShard, ExcludeNode, SetTakeoverPolicy,
//     ForgetNode, Settings, LogSettings, ClusterConfig and draining
//     another node — need an operator certificate or a voter-capable node
//     (whose API checked an admin-scope token); a ClusterConfig must name a
//     version this leader reads and a registered node speaks;
//   - Grant, Revoke and ExpireNode come from the leader alone, so a
//     forwarded one is always refused, as is every kind without a row;
//   - a Session or Batch is judged by the commands it wraps.
//
// Epoch checks read st, the leader's applied state: the caller must make sure
// st includes every entry committed when the command arrived (a member can
// only know of a grant once it is committed).
func Authorize(st *State, p Proposer, c Command) error {
	a := authz{st: st, p: p, c: c}
	if p.ID == "" {
		return fmt.Errorf("%w: anonymous proposer", ErrUnauthorized)
	}
	if c == nil {
		return fmt.Errorf("%w: empty command", ErrUnauthorized)
	}
	if e := specOf(c); e != nil && e.authorize != nil {
		return e.authorize(a, c)
	}
	return a.deny("only the control-group leader proposes it")
}
