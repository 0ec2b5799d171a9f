package ledger

// Command is one state-machine transition. Every command carries everything
// Apply needs (ids, epochs, the proposer's clock as unix ns): Apply never
// reads the clock, randomness or map order. Encoding: see encode.go.
type Command interface{ kind() Kind }

// Kind identifies a command type on the wire. Values are stable forever.
type Kind uint8

const (
	KindHeartbeat   Kind = 1
	KindExpireNode  Kind = 2
	KindSetDraining Kind = 3
	KindGrant       Kind = 4
	KindRevoke      Kind = 5
	KindRelease     Kind = 6
	KindTransfer    Kind = 7
	KindJobEnqueue  Kind = 8
	KindJobStart    Kind = 9
	KindJobComplete Kind = 10
	KindJobFail     Kind = 11
	KindApp         Kind = 12
	KindSettings    Kind = 13
	KindBatch       Kind = 14
)

// Heartbeat registers or renews a node. Accepted when Incarnation is higher
// than the stored one (a restart: the record is replaced and the liveness
// epoch incremented, proving the old incarnation dead), or when Incarnation
// and Liveness equal the stored ones (a renewal: Seq++). Otherwise it is
// rejected with ErrStaleIncarnation or ErrStaleLiveness; the result carries
// the current record so the node can re-register at the current liveness.
// Liveness == 0 with a known, equal incarnation means "rejoin at whatever the
// current liveness epoch is" (used after ExpireNode).
type Heartbeat struct {
	Node        string
	Incarnation uint64
	Liveness    uint64
	Now         int64
	// MinVersion and MaxVersion are the cluster versions the node's binary
	// speaks (encoding version 3; 0, 0 means version 1 only). A heartbeat
	// from a binary that cannot run at the active version is refused
	// (ErrVersion).
	MinVersion, MaxVersion uint32
}

// ExpireNode increments a node's liveness epoch. It is a compare-and-set on
// (Incarnation, Liveness, Seq): the leader proposes it only after it has seen
// no heartbeat for lease+drift margin by its own clock, and a heartbeat that
// lands first makes it fail with ErrConflict.
type ExpireNode struct {
	Node        string
	Incarnation uint64
	Liveness    uint64
	Seq         uint64
	Now         int64
}

// SetDraining marks a node (at an incarnation) as draining or not.
type SetDraining struct {
	Node        string
	Incarnation uint64
	Draining    bool
	Now         int64
}

// Grant gives shard to Owner at Epoch = ExpectedEpoch+1. CAS on the shard's
// epoch. Allowed when the shard is Unowned, or its owner's ownership is no
// longer valid (owner's NodeRecord incarnation/liveness moved on), or — with
// Takeover set — when the shard is Revoking (the leader has waited out the
// owner's lease plus drain timeout). The new owner must have a NodeRecord
// matching OwnerIncarnation and OwnerLiveness.
type Grant struct {
	Shard            uint32
	ExpectedEpoch    uint64
	Owner            string
	OwnerIncarnation uint64
	OwnerLiveness    uint64
	Takeover         bool
	Now              int64
	Reason           string
}

// Revoke asks the owner at Epoch to hand the shard over (to Target, or to
// whoever the planner picks when Target is empty). Owned -> Revoking.
type Revoke struct {
	Shard  uint32
	Epoch  uint64
	Target string
	Now    int64
	Reason string
}

// Release is proposed by the owner at Epoch after it has stopped acting:
// Owned|Revoking -> Unowned. The epoch is unchanged. Avoid marks a
// resignation: the record's AvoidOwner becomes Owner, so the planner
// prefers another node for the next grant.
type Release struct {
	Shard uint32
	Epoch uint64
	Owner string
	Now   int64
	Avoid bool
}

// Transfer is Release+Grant in one entry, proposed by the old owner after it
// has drained: From at Epoch hands the shard to To at Epoch+1.
type Transfer struct {
	Shard         uint32
	Epoch         uint64
	From          string
	To            string
	ToIncarnation uint64
	ToLiveness    uint64
	Now           int64
	Reason        string
}

// JobEnqueue adds a job to a shard's queue. Anyone may enqueue. A non-empty
// Key is an idempotency key, unique per shard: enqueueing it again returns
// the existing job (Result.Job, Result.Duplicate) for as long as the job is
// retained. The ledger assigns the job id (a sequence, deterministic).
// MaxAttempts 0 means the configured default.
type JobEnqueue struct {
	Shard       uint32
	Key         string
	Type        string
	Payload     []byte
	MaxAttempts uint32
	Now         int64
	// MaxPending is the proposer's cap on the shard's pending jobs (0:
	// none; encoding version 7, cluster version 5): a new job is refused
	// with ErrQueueFull while the shard holds that many. A duplicate key is
	// still answered.
	MaxPending uint32
}

// JobStart starts the next attempt of a job. Accepted only from the shard's
// valid owner Owner at the current Epoch while the shard is Owned (not
// Revoking), when Attempt equals the job's current attempt (a CAS) and the
// job is Pending (and Now ≥ its backoff NotBefore) or Started but abandoned:
// its attempt started at an older epoch of the shard (the previous owner's
// attempt, already fenced out: its Complete/Fail fails with ErrStaleEpoch,
// so the new owner need not wait for the timeout), or it timed out (Now >
// StartedAt+Timeout of that attempt). The job's attempt becomes Attempt+1,
// its idempotency token "<id>/<attempt>". An abandoned job that has used
// MaxAttempts is dead-lettered instead (ErrJobFinished, the job in the
// result). Timeout is the new attempt's timeout in ns (0 = never).
type JobStart struct {
	Shard   uint32
	Epoch   uint64
	Owner   string
	Job     uint64
	Attempt uint32
	Timeout int64
	Now     int64
}

// JobComplete finishes a started job. Fenced: Epoch must be the shard's
// current epoch and the epoch the attempt started at, Attempt the job's
// current attempt, and the shard's ownership valid (Owned or Revoking: a
// draining owner may finish its work). A job completes at most once.
type JobComplete struct {
	Shard   uint32
	Epoch   uint64
	Job     uint64
	Attempt uint32
	Result  []byte
	Now     int64
}

// JobFail records a failed attempt, fenced like JobComplete. The job goes
// back to Pending with NotBefore = Now+Backoff, or is dead-lettered when it
// has used MaxAttempts.
type JobFail struct {
	Shard   uint32
	Epoch   uint64
	Job     uint64
	Attempt uint32
	Error   string
	Backoff int64
	Now     int64
}

// App is an application command: the shard's owner at Epoch proposes a
// typed payload that every replica applies, in log order, to the state
// machine registered for Type. Accepted when Epoch is the shard's current
// epoch and its ownership is valid (Owned or Revoking).
type App struct {
	Shard   uint32
	Epoch   uint64
	Type    string
	Payload []byte
	Now     int64
}

// Settings changes the ledger's replicated settings (job retention and
// defaults). Zero fields keep their current value.
type Settings struct {
	JobRetention       int64  // ns a finished job is kept after it finished
	MaxFinishedJobs    uint32 // at most this many finished jobs are kept
	DefaultMaxAttempts uint32 // MaxAttempts for jobs enqueued with 0
	Now                int64
}

// Batch groups commands into one log entry (group commit). Each is applied
// in order with its own result; a rejected command does not affect the
// others. Batches do not nest.
type Batch struct {
	Commands []Command
}

func (Heartbeat) kind() Kind   { return KindHeartbeat }
func (ExpireNode) kind() Kind  { return KindExpireNode }
func (SetDraining) kind() Kind { return KindSetDraining }
func (Grant) kind() Kind       { return KindGrant }
func (Revoke) kind() Kind      { return KindRevoke }
func (Release) kind() Kind     { return KindRelease }
func (Transfer) kind() Kind    { return KindTransfer }
func (JobEnqueue) kind() Kind  { return KindJobEnqueue }
func (JobStart) kind() Kind    { return KindJobStart }
func (JobComplete) kind() Kind { return KindJobComplete }
func (JobFail) kind() Kind     { return KindJobFail }
func (App) kind() Kind         { return KindApp }
func (Settings) kind() Kind    { return KindSettings }
func (Batch) kind() Kind       { return KindBatch }

// KindOf returns the wire kind of a command.
func KindOf(c Command) Kind { return c.kind() }

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindHeartbeat:
		return "Heartbeat"
	case KindExpireNode:
		return "ExpireNode"
	case KindSetDraining:
		return "SetDraining"
	case KindGrant:
		return "Grant"
	case KindRevoke:
		return "Revoke"
	case KindRelease:
		return "Release"
	case KindTransfer:
		return "Transfer"
	case KindJobEnqueue:
		return "JobEnqueue"
	case KindJobStart:
		return "JobStart"
	case KindJobComplete:
		return "JobComplete"
	case KindJobFail:
		return "JobFail"
	case KindApp:
		return "App"
	case KindSettings:
		return "Settings"
	case KindBatch:
		return "Batch"
	case KindDeclareElection:
		return "DeclareElection"
	case KindClusterConfig:
		return "ClusterConfig"
	case KindSession:
		return "Session"
	case KindPinShard:
		return "PinShard"
	case KindExcludeNode:
		return "ExcludeNode"
	case KindClaimIncarnation:
		return "ClaimIncarnation"
	case KindForgetNode:
		return "ForgetNode"
	case KindSetTakeoverPolicy:
		return "SetTakeoverPolicy"
	case KindLogSettings:
		return "LogSettings"
	case KindRevokeNode:
		return "RevokeNode"
	}
	return "Kind(" + itoa(uint64(k)) + ")"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
