package ledger

// This file is the contract between the ledger and its readers (ownership's
// planner, the node's lease tracker, the simulator). Fields may be added;
// existing meanings must not change without updating docs/ledger.md.

// ShardState is the committed state of one shard.
type ShardState uint8

const (
	// ShardUnowned: no owner may act. Epoch keeps its last value; the next
	// Grant or Transfer moves it to Epoch+1.
	ShardUnowned ShardState = iota
	// ShardOwned: Owner may act while its node lease is valid.
	ShardOwned
	// ShardRevoking: the control group asked Owner to hand the shard over
	// (drain, rebalance). Owner keeps acting only to drain; it must stop
	// within its drain timeout and then Release or Transfer.
	ShardRevoking
)

// ShardRecord is one row of the ownership table.
type ShardRecord struct {
	Shard uint32
	// Epoch is the fencing token. It increases by exactly one on every Grant
	// or Transfer and never decreases (S1).
	Epoch uint64
	// Owner is the owning node id; empty when never owned. After Release it
	// keeps the previous owner (for stickiness) while State is ShardUnowned.
	Owner string
	// OwnerIncarnation and OwnerLiveness are the owner's node incarnation and
	// liveness epoch at the time of the grant. The ownership is valid only
	// while the owner's NodeRecord still has exactly these values.
	OwnerIncarnation uint64
	OwnerLiveness    uint64
	State            ShardState
	// Target is the node a Revoke intends the shard for ("" = planner decides).
	Target string
	// ChangedAt is the proposer's clock (unix ns) of the last change; for
	// display only: never compared across proposers.
	ChangedAt int64
	// Reason is a short human reason for the last change ("join n3", "drain").
	Reason string
	// AvoidOwner is a placement hint: the node that gave the shard up with
	// Release{Avoid: true} (a resignation). The planner grants the shard to
	// another eligible node while one exists and does not move it back to
	// AvoidOwner to rebalance. A Grant to AvoidOwner itself (it was the
	// only eligible node), a Transfer, or a Release without Avoid clears it.
	AvoidOwner string
}

// NodeRecord is a node's committed liveness (CockroachDB-style epoch-based
// node liveness).
type NodeRecord struct {
	ID string
	// Incarnation identifies one process lifetime of the node; a higher
	// incarnation proves every lower one dead.
	Incarnation uint64
	// Liveness is the node's liveness epoch. ExpireNode increments it, which
	// invalidates every shard granted under the old value at once.
	Liveness uint64
	// Seq increases on every applied heartbeat; ExpireNode is a CAS on it.
	Seq uint64
	// HeartbeatAt is the proposer clock (unix ns) of the last heartbeat; for
	// display only.
	HeartbeatAt int64
	Draining    bool
	// MinVersion and MaxVersion are the cluster versions the node's binary
	// speaks, from its last heartbeat (0, 0 for a binary older than cluster
	// versions: it speaks version 1 only). See SpeakRange.
	MinVersion, MaxVersion uint32
}

// String names the state.
func (s ShardState) String() string {
	return enumName(shardStateNames, uint64(s), "ShardState")
}

var shardStateNames = []string{ShardUnowned: "unowned", ShardOwned: "owned", ShardRevoking: "revoking"}

// enumName is names[v], or typ(v) for a value without a name.
func enumName(names []string, v uint64, typ string) string {
	if v < uint64(len(names)) {
		return names[v]
	}
	return typ + "(" + itoa(v) + ")"
}

// JobState is the committed state of one job.
type JobState uint8

const (
	// JobPending: waiting to be started (first attempt, or a retry after
	// NotBefore).
	JobPending JobState = iota
	// JobStarted: attempt Attempt runs on Owner at Epoch.
	JobStarted
	// JobCompleted: finished successfully (terminal).
	JobCompleted
	// JobDead: dead-lettered after MaxAttempts (terminal).
	JobDead
)

// String names the state.
func (s JobState) String() string {
	return enumName(jobStateNames, uint64(s), "JobState")
}

var jobStateNames = []string{JobPending: "pending", JobStarted: "started", JobCompleted: "completed", JobDead: "dead"}

// Finished reports whether the state is terminal.
func (s JobState) Finished() bool { return s == JobCompleted || s == JobDead }

// JobRecord is one job.
type JobRecord struct {
	// ID is assigned by the ledger from a sequence (1, 2, ...).
	ID    uint64
	Shard uint32
	// Key is the idempotency key given at enqueue ("" = none).
	Key     string
	Type    string
	Payload []byte
	State   JobState
	// Attempt is the number of the current (or last) attempt; 0 before the
	// first start.
	Attempt     uint32
	MaxAttempts uint32
	// Owner and Epoch are the node and shard epoch of the current attempt.
	Owner string
	Epoch uint64
	// StartedAt and Timeout (ns; 0 = none) of the current attempt.
	StartedAt int64
	Timeout   int64
	// NotBefore is the earliest start of the next attempt (retry backoff).
	NotBefore  int64
	EnqueuedAt int64
	FinishedAt int64
	// LastError is the error of the last failed (or timed-out) attempt.
	LastError string
	// Result is what JobComplete recorded.
	Result []byte
}

// Token is the idempotency token of the current attempt, "<id>/<attempt>":
// side effects keyed by it happen at most once per attempt.
func (j JobRecord) Token() string { return itoa(j.ID) + "/" + itoa(uint64(j.Attempt)) }

// Runnable reports whether a JobStart at now on the job's shard, at
// epoch, may start a new attempt: the job is pending and past its retry
// backoff, or its started attempt is abandoned — it began at an older
// epoch of the shard (fenced out) or timed out. The one statement of the
// rule: State.RunnableJobs and node's Job.Runnable and RunnableJobs read
// it; JobStart makes the same two checks (abandoned) with an error each.
func (j JobRecord) Runnable(epoch uint64, now int64) bool {
	switch j.State {
	case JobPending:
		return now >= j.NotBefore
	case JobStarted:
		_, ok := abandoned(j, epoch, now)
		return ok
	}
	return false
}

// LedgerSettings are the settings Apply judges with. The job fields are
// replicated (the Settings command changes them; a replica starts from its
// Config). MaxPayload, SessionWindow (ns) and MaxSessions are this
// replica's Config until LogSettings is committed (cluster version 4,
// VersionLogSettings); from then on Logged is set and all of them come
// from the log, the same on every replica.
type LedgerSettings struct {
	JobRetention       int64
	MaxFinishedJobs    uint32
	DefaultMaxAttempts uint32
	MaxPayload         uint32
	SessionWindow      int64
	MaxSessions        uint32
	Logged             bool
}
