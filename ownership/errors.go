package ownership

import "errors"

// Sentinel errors; match with errors.Is.
var (
	// ErrInvalidConfig: a Config field is out of range (Validate).
	ErrInvalidConfig = errors.New("ownership: invalid config")
	// ErrLeadershipLost: the proposer lost leadership; the outcome of the
	// proposal is unknown. Retrying is safe: every proposal is a CAS.
	ErrLeadershipLost = errors.New("ownership: leadership lost")
	// ErrNotLeader: a proposal was made on a node that is not the leader.
	ErrNotLeader = errors.New("ownership: not the leader")
	// ErrExpiring: the leader has proposed to expire the renewing node's
	// liveness epoch (Planner.Renew); the renewal failed, and the node
	// retries at its next renewal.
	ErrExpiring = errors.New("ownership: node is being expired")
)
