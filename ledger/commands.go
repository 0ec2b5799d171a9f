package ledger

import "fmt"

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

func (Heartbeat) kind() Kind { return KindHeartbeat }

func init() {
	register(kindSpec[Heartbeat]{
		kind: KindHeartbeat, name: "Heartbeat",
		version: func(c Heartbeat) byte {
			if c.MinVersion != 0 || c.MaxVersion != 0 {
				return 3
			}
			return minVersion
		},
		fields: func(cd codec, c Heartbeat) Heartbeat {
			cd.walk(limited{"node", &c.Node}, &c.Incarnation, &c.Liveness, &c.Now)
			if cd.has(3) {
				cd.walk(&c.MinVersion, &c.MaxVersion)
			}
			return c
		},
		apply:      func(f *FSM, _ uint64, c Heartbeat) Result { return f.heartbeat(c) },
		who:        whoSelf,
		authorize:  func(a authz, c Heartbeat) error { return a.self("Node", c.Node) },
		sessionNow: func(c Heartbeat) int64 { return c.Now },
		touches:    func(c Heartbeat) ([]string, []uint32) { return []string{c.Node}, nil },
		format: func(c Heartbeat) string {
			return fmt.Sprintf("heartbeat %s inc=%d live=%d", c.Node, c.Incarnation, c.Liveness)
		},
	})
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

func (ExpireNode) kind() Kind { return KindExpireNode }

func init() {
	register(kindSpec[ExpireNode]{
		kind: KindExpireNode, name: "ExpireNode",
		fields:     nodeCASFields,
		apply:      func(f *FSM, _ uint64, c ExpireNode) Result { return f.expireNode(c) },
		who:        whoLeader,
		sessionNow: func(c ExpireNode) int64 { return c.Now },
		touches:    func(c ExpireNode) ([]string, []uint32) { return []string{c.Node}, nil },
		format:     func(c ExpireNode) string { return formatNodeCAS("expire", c) },
	})
}

// nodeCASFields and formatNodeCAS serve the commands that compare-and-set
// a node record at (Incarnation, Liveness, Seq): ExpireNode and ForgetNode
// (which converts to ExpireNode: same fields).
func nodeCASFields(cd codec, c ExpireNode) ExpireNode {
	cd.walk(limited{"node", &c.Node}, &c.Incarnation, &c.Liveness, &c.Seq, &c.Now)
	return c
}

func formatNodeCAS(verb string, c ExpireNode) string {
	return fmt.Sprintf("%s %s inc=%d live=%d seq=%d", verb, c.Node, c.Incarnation, c.Liveness, c.Seq)
}

// SetDraining marks a node (at an incarnation) as draining or not.
type SetDraining struct {
	Node        string
	Incarnation uint64
	Draining    bool
	Now         int64
}

func (SetDraining) kind() Kind { return KindSetDraining }

func init() {
	register(kindSpec[SetDraining]{
		kind: KindSetDraining, name: "SetDraining",
		fields: func(cd codec, c SetDraining) SetDraining {
			cd.walk(limited{"node", &c.Node}, &c.Incarnation, &c.Draining, &c.Now)
			return c
		},
		apply: func(f *FSM, _ uint64, c SetDraining) Result { return f.setDraining(c) },
		who:   whoSelfOrOp,
		authorize: func(a authz, c SetDraining) error {
			if a.p.Operator || a.p.Voter {
				return nil
			}
			return a.self("Node", c.Node)
		},
		sessionNow: func(c SetDraining) int64 { return c.Now },
		touches:    func(c SetDraining) ([]string, []uint32) { return []string{c.Node}, nil },
		format: func(c SetDraining) string {
			return fmt.Sprintf("set-draining %s inc=%d draining=%t", c.Node, c.Incarnation, c.Draining)
		},
	})
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

func (Grant) kind() Kind { return KindGrant }

func init() {
	register(kindSpec[Grant]{
		kind: KindGrant, name: "Grant",
		fields: func(cd codec, c Grant) Grant {
			cd.walk(&c.Shard, &c.ExpectedEpoch, limited{"owner", &c.Owner}, &c.OwnerIncarnation,
				&c.OwnerLiveness, &c.Takeover, &c.Now, limited{"reason", &c.Reason})
			return c
		},
		apply:        func(f *FSM, _ uint64, c Grant) Result { return f.grant(c) },
		who:          whoLeader,
		sessionNow:   func(c Grant) int64 { return c.Now },
		sessionShard: func(c Grant) uint32 { return c.Shard },
		touches:      func(c Grant) ([]string, []uint32) { return nil, []uint32{c.Shard} },
		format: func(c Grant) string {
			kind := "grant"
			if c.Takeover {
				kind = "takeover"
			}
			return fmt.Sprintf("%s s%d e%d -> %s inc=%d live=%d (%s)", kind, c.Shard, c.ExpectedEpoch+1, c.Owner, c.OwnerIncarnation, c.OwnerLiveness, c.Reason)
		},
	})
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

func (Revoke) kind() Kind { return KindRevoke }

func init() {
	register(kindSpec[Revoke]{
		kind: KindRevoke, name: "Revoke",
		fields: func(cd codec, c Revoke) Revoke {
			cd.walk(&c.Shard, &c.Epoch, limited{"target", &c.Target}, &c.Now, limited{"reason", &c.Reason})
			return c
		},
		apply:        func(f *FSM, _ uint64, c Revoke) Result { return f.revoke(c) },
		who:          whoLeader,
		sessionNow:   func(c Revoke) int64 { return c.Now },
		sessionShard: func(c Revoke) uint32 { return c.Shard },
		touches:      func(c Revoke) ([]string, []uint32) { return nil, []uint32{c.Shard} },
		format: func(c Revoke) string {
			return fmt.Sprintf("revoke s%d e%d target=%s (%s)", c.Shard, c.Epoch, c.Target, c.Reason)
		},
	})
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

func (Release) kind() Kind { return KindRelease }

func init() {
	register(kindSpec[Release]{
		kind: KindRelease, name: "Release",
		version: func(c Release) byte {
			if c.Avoid {
				return 2
			}
			return minVersion
		},
		fields: func(cd codec, c Release) Release {
			cd.walk(&c.Shard, &c.Epoch, limited{"owner", &c.Owner}, &c.Now)
			if cd.has(2) {
				cd.walk(&c.Avoid)
			}
			return c
		},
		apply:        func(f *FSM, _ uint64, c Release) Result { return f.release(c) },
		who:          whoOwner,
		authorize:    func(a authz, c Release) error { return a.self("Owner", c.Owner) },
		sessionNow:   func(c Release) int64 { return c.Now },
		sessionShard: func(c Release) uint32 { return c.Shard },
		touches:      func(c Release) ([]string, []uint32) { return nil, []uint32{c.Shard} },
		format:       func(c Release) string { return fmt.Sprintf("release s%d e%d by %s", c.Shard, c.Epoch, c.Owner) },
	})
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

func (Transfer) kind() Kind { return KindTransfer }

func init() {
	register(kindSpec[Transfer]{
		kind: KindTransfer, name: "Transfer",
		fields: func(cd codec, c Transfer) Transfer {
			cd.walk(&c.Shard, &c.Epoch, limited{"from", &c.From}, limited{"to", &c.To}, &c.ToIncarnation,
				&c.ToLiveness, &c.Now, limited{"reason", &c.Reason})
			return c
		},
		apply:        func(f *FSM, _ uint64, c Transfer) Result { return f.transfer(c) },
		who:          whoOwner,
		authorize:    func(a authz, c Transfer) error { return a.self("From", c.From) },
		sessionNow:   func(c Transfer) int64 { return c.Now },
		sessionShard: func(c Transfer) uint32 { return c.Shard },
		touches:      func(c Transfer) ([]string, []uint32) { return nil, []uint32{c.Shard} },
		format: func(c Transfer) string {
			return fmt.Sprintf("transfer s%d e%d %s -> %s", c.Shard, c.Epoch+1, c.From, c.To)
		},
	})
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

func (JobEnqueue) kind() Kind { return KindJobEnqueue }

func init() {
	register(kindSpec[JobEnqueue]{
		kind: KindJobEnqueue, name: "JobEnqueue",
		version: func(c JobEnqueue) byte {
			if c.MaxPending != 0 {
				return encodingJobsAPI
			}
			return minVersion
		},
		fields: func(cd codec, c JobEnqueue) JobEnqueue {
			cd.walk(&c.Shard, limited{"key", &c.Key}, limited{"type", &c.Type}, &c.Payload, &c.MaxAttempts,
				&c.Now)
			if cd.has(encodingJobsAPI) {
				cd.walk(&c.MaxPending)
			}
			return c
		},
		apply: thenPrune((*FSM).jobEnqueue, func(c JobEnqueue) int64 { return c.Now }),
		// Members serve the API clients' enqueues.
		who:          whoAnyone,
		authorize:    anyone[JobEnqueue],
		sessionNow:   func(c JobEnqueue) int64 { return c.Now },
		sessionShard: func(c JobEnqueue) uint32 { return c.Shard },
		digest: func(w *writer, c JobEnqueue) {
			w.u(uint64(c.Shard))
			w.str(c.Key)
			w.str(c.Type)
			w.bytes(c.Payload)
			w.u(uint64(c.MaxAttempts))
		},
	})
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

func (JobStart) kind() Kind { return KindJobStart }

func init() {
	register(fencedOwner(kindSpec[JobStart]{
		kind: KindJobStart, name: "JobStart",
		fields: func(cd codec, c JobStart) JobStart {
			cd.walk(&c.Shard, &c.Epoch, limited{"owner", &c.Owner}, &c.Job, &c.Attempt, &c.Timeout, &c.Now)
			return c
		},
		apply: thenPrune((*FSM).jobStart, func(c JobStart) int64 { return c.Now }),
		authorize: func(a authz, c JobStart) error {
			if err := a.self("Owner", c.Owner); err != nil {
				return err
			}
			return a.fenced(c.Shard, c.Epoch)
		},
	}, func(c JobStart) (uint32, uint64, int64) { return c.Shard, c.Epoch, c.Now }))
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

func (JobComplete) kind() Kind { return KindJobComplete }

func init() {
	register(fencedOwner(kindSpec[JobComplete]{
		kind: KindJobComplete, name: "JobComplete",
		fields: func(cd codec, c JobComplete) JobComplete {
			cd.walk(&c.Shard, &c.Epoch, &c.Job, &c.Attempt, &c.Result, &c.Now)
			return c
		},
		apply: thenPrune((*FSM).jobComplete, func(c JobComplete) int64 { return c.Now }),
	}, func(c JobComplete) (uint32, uint64, int64) { return c.Shard, c.Epoch, c.Now }))
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

func (JobFail) kind() Kind { return KindJobFail }

func init() {
	register(fencedOwner(kindSpec[JobFail]{
		kind: KindJobFail, name: "JobFail",
		fields: func(cd codec, c JobFail) JobFail {
			cd.walk(&c.Shard, &c.Epoch, &c.Job, &c.Attempt, limited{"error", &c.Error}, &c.Backoff, &c.Now)
			return c
		},
		apply: thenPrune((*FSM).jobFail, func(c JobFail) int64 { return c.Now }),
	}, func(c JobFail) (uint32, uint64, int64) { return c.Shard, c.Epoch, c.Now }))
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

func (App) kind() Kind { return KindApp }

func init() {
	register(fencedOwner(kindSpec[App]{
		kind: KindApp, name: "App",
		fields: func(cd codec, c App) App {
			cd.walk(&c.Shard, &c.Epoch, limited{"type", &c.Type}, &c.Payload, &c.Now)
			return c
		},
		apply: func(f *FSM, index uint64, c App) Result { return f.app(index, c) },
		digest: func(w *writer, c App) {
			w.u(uint64(c.Shard))
			w.str(c.Type)
			w.bytes(c.Payload)
		},
	}, func(c App) (uint32, uint64, int64) { return c.Shard, c.Epoch, c.Now }))
}

// Settings changes the ledger's replicated settings (job retention and
// defaults). Zero fields keep their current value.
type Settings struct {
	JobRetention       int64  // ns a finished job is kept after it finished
	MaxFinishedJobs    uint32 // at most this many finished jobs are kept
	DefaultMaxAttempts uint32 // MaxAttempts for jobs enqueued with 0
	Now                int64
}

func (Settings) kind() Kind { return KindSettings }

func init() {
	register(kindSpec[Settings]{
		kind: KindSettings, name: "Settings",
		fields: func(cd codec, c Settings) Settings {
			cd.walk(&c.JobRetention, &c.MaxFinishedJobs, &c.DefaultMaxAttempts, &c.Now)
			return c
		},
		apply:      thenPrune((*FSM).settings, func(c Settings) int64 { return c.Now }),
		who:        whoOperator,
		authorize:  operatorOnly[Settings],
		sessionNow: func(c Settings) int64 { return c.Now },
	})
}

// Batch groups commands into one log entry (group commit). Each is applied
// in order with its own result; a rejected command does not affect the
// others. Batches do not nest.
type Batch struct {
	Commands []Command
}

func (Batch) kind() Kind { return KindBatch }

func init() {
	register(kindSpec[Batch]{
		kind: KindBatch, name: "Batch",
		version: func(c Batch) byte {
			v := minVersion
			for _, sc := range c.Commands {
				if _, nested := sc.(Batch); !nested {
					v = max(v, versionFor(sc))
				}
			}
			return v
		},
		encode: func(w *writer, c Batch) error {
			if w.nested {
				return fmt.Errorf("%w: nested batch", ErrInvalid)
			}
			if len(c.Commands) > MaxBatchEntries {
				return fmt.Errorf("%w: batch of %d commands exceeds %d", ErrTooLarge, len(c.Commands), MaxBatchEntries)
			}
			w.u(uint64(len(c.Commands)))
			sub := &writer{ver: w.ver, nested: true}
			for _, sc := range c.Commands {
				sub.b = sub.b[:0]
				if err := encodeBody(sub, sc); err != nil {
					return err
				}
				w.bytes(sub.b)
			}
			return nil
		},
		decode: decodeBatch,
		// Applied entry by entry (FSM.applyTop); never inside a Session.
		who: whoWrapped,
		authorize: func(a authz, c Batch) error {
			for i, sub := range c.Commands {
				if err := Authorize(a.st, a.p, sub); err != nil {
					return fmt.Errorf("batch entry %d: %w", i, err)
				}
			}
			return nil
		},
		touches: func(c Batch) (nodes []string, shards []uint32) {
			for _, sc := range c.Commands {
				n, s := Touched(sc)
				nodes, shards = append(nodes, n...), append(shards, s...)
			}
			return nodes, shards
		},
	})
}

func decodeBatch(r *reader) Batch {
	if r.nested {
		r.fail(fmt.Errorf("%w: nested batch", ErrMalformed))
		return Batch{}
	}
	n := r.u()
	if r.err != nil {
		return Batch{}
	}
	if n > MaxBatchEntries {
		r.fail(fmt.Errorf("%w: batch of %d commands exceeds %d", ErrTooLarge, n, MaxBatchEntries))
		return Batch{}
	}
	if n > uint64(len(r.b)) { // every entry takes at least one byte
		r.fail(fmt.Errorf("%w: batch of %d commands in %d bytes", ErrMalformed, n, len(r.b)))
		return Batch{}
	}
	cmds := make([]Command, 0, n)
	for range n {
		sub := &reader{b: r.raw(MaxCommandSize), ver: r.ver, nested: true}
		if r.err != nil {
			return Batch{}
		}
		c := decodeBody(sub)
		if sub.err != nil {
			r.fail(sub.err)
			return Batch{}
		}
		if len(sub.b) != 0 {
			r.fail(fmt.Errorf("%w: %d trailing bytes in batch entry", ErrMalformed, len(sub.b)))
			return Batch{}
		}
		cmds = append(cmds, c)
	}
	return Batch{Commands: cmds}
}

// KindOf returns the wire kind of a command.
func KindOf(c Command) Kind { return c.kind() }
