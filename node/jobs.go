package node

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// JobState is where a job is in its life (the one definition is
// ledger.JobState; Finished reports the final states):
//
//	pending ──Start──▶ started ──Complete──▶ completed
//	   ▲                  │
//	   └──Fail────────────┤ (attempts left: back to pending after a backoff)
//	                      ├──Fail, attempts used up──▶ dead
//	                      └──timed out: the shard's owner (the next one, if
//	                         the old owner failed) starts a new attempt
type JobState = ledger.JobState

// The job states.
const (
	// JobPending: enqueued, or failed and waiting for a retry.
	JobPending = ledger.JobPending
	// JobStarted: an attempt is running on the shard's owner.
	JobStarted = ledger.JobStarted
	// JobCompleted: an attempt completed; final.
	JobCompleted = ledger.JobCompleted
	// JobDead: out of attempts (dead-lettered); final.
	JobDead = ledger.JobDead
)

// DefaultJobTimeout is the default of Config.JobTimeout.
const DefaultJobTimeout = time.Minute

// JobSpec describes a job to enqueue.
type JobSpec struct {
	// Key is the job's idempotency key, unique per shard: enqueueing the
	// same key twice yields one job (for as long as the job is retained).
	// Use a key that names the logical operation, e.g.
	// "charge/order-123/payment-1". Empty means no deduplication.
	Key string
	// ShardKey chooses the job's shard: ShardFor(ShardKey), or
	// ShardFor(Key) when empty. Jobs of one tenant usually share a
	// ShardKey, the tenant id.
	ShardKey string
	// Type is an application-defined job type.
	Type string
	// Payload is opaque application data.
	Payload []byte
	// MaxAttempts bounds the attempts (0: the cluster's default, 5).
	MaxAttempts int
	// RequestID names this logical request across its retries (zero: the
	// node draws one per Enqueue call). A retry with the same id — through
	// any node, within the ledger's session window — is not applied again:
	// it answers the first try's result, created true if that try created
	// the job. The same id with another spec fails with
	// ErrRequestIDReused (cluster version 5). Ids are honoured once the
	// cluster runs version 2 (docs/jobs.md, "Request ids").
	RequestID RequestID
}

// Job is a job's committed record.
type Job struct {
	// ID is assigned by the cluster (1, 2, ...).
	ID    uint64
	Shard uint32
	// Key is the idempotency key given at enqueue.
	Key     string
	Type    string
	Payload []byte
	State   JobState
	// Attempt is the number of the current (or last) attempt, 0 before the
	// first start.
	Attempt     uint32
	MaxAttempts uint32
	// Owner and Epoch are the node and shard epoch of the current attempt.
	Owner string
	Epoch uint64
	// Timeout bounds the current attempt (0: none).
	Timeout time.Duration
	// Result is what the completing attempt recorded; Error why the last
	// attempt failed or timed out.
	Result []byte
	Error  string
	// NotBefore is the earliest start of a retry.
	NotBefore  time.Time
	EnqueuedAt time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// Token returns the fencing token the current attempt was started under.
func (j Job) Token() Token { return Token{Shard: j.Shard, Epoch: j.Epoch} }

// AttemptToken identifies the current attempt, "id/attempt" (e.g. "17/2").
// Pass it to side effects that must be deduplicated per attempt; pass Key
// to those that must happen once per job, across attempts.
func (j Job) AttemptToken() string { return j.record().Token() }

// Runnable reports whether the shard's owner may start an attempt at now:
// the job is pending and past its retry backoff, or its running attempt
// timed out (its node failed, or is stuck). The rule is the ledger's
// (ledger.JobRecord.Runnable).
func (j Job) Runnable(now time.Time) bool { return runnableAt(j, 0, now) }

// runnableAt is Job.Runnable on a shard at epoch: a started attempt from
// an older epoch may be superseded at once (the ledger fences it out).
func runnableAt(j Job, epoch uint64, now time.Time) bool {
	return j.record().Runnable(epoch, now.UnixNano())
}

// JobQuery selects jobs. Zero fields match everything.
type JobQuery struct {
	// Shards restricts the result to these shards.
	Shards []uint32
	// States restricts the result to these states.
	States []JobState
	// Limit bounds the result (0: no bound).
	Limit int
}

func (q JobQuery) match(j Job) bool {
	if len(q.Shards) > 0 && !slices.Contains(q.Shards, j.Shard) {
		return false
	}
	if len(q.States) > 0 && !slices.Contains(q.States, j.State) {
		return false
	}
	return true
}

// JobEvent is one committed change of a job.
type JobEvent struct {
	Job Job
	// Created reports that the job is new to this subscription's node;
	// Previous is then meaningless.
	Created bool
	// Previous is the state before the change (unless Created).
	Previous JobState
}

// Enqueue commits a new job, or — if a job with spec.Key exists on its
// shard — returns the existing one with created false. Any node may
// enqueue. The answer is the ledger's result for the committed entry (the
// job as the log had it at that entry), never this node's replica: it is
// linearizable. Job commands whose outcome is unknown (a control-group
// leader change mid-commit) are retried internally when that is safe:
// always for start, complete and fail (compare-and-set on the attempt),
// and for enqueue when it carries a request id (cluster version 2) or has
// a Key. With Config.MaxPendingJobs set, a new job on a full shard fails
// with ErrQueueFull (decided by the ledger from cluster version 5).
func (n *Node) Enqueue(ctx context.Context, spec JobSpec) (job Job, created bool, err error) {
	if n.isClosed() {
		return Job{}, false, ErrClosed
	}
	if spec.ShardKey == "" {
		spec.ShardKey = spec.Key
	}
	if spec.MaxAttempts < 0 {
		return Job{}, false, fmt.Errorf("node: enqueue %q: %w: MaxAttempts %d < 0", truncKey(spec.Key), ErrInvalid, spec.MaxAttempts)
	}
	if err := checkJobSpec(spec, n.be.maxPayload()); err != nil {
		return Job{}, false, fmt.Errorf("node: enqueue: %w", err)
	}
	shard := n.ShardFor(spec.ShardKey)
	maxPending := n.cfg.MaxPendingJobs
	if maxPending > 0 && !n.be.versionActive(ledger.VersionJobsAPI) {
		// Before cluster version 5 the cap is checked here, on this
		// replica (advisory: see Config.MaxPendingJobs). A key this replica
		// already holds is proposed all the same: the ledger answers the
		// duplicate as the log has the job, where this replica may lag.
		held := false
		if spec.Key != "" {
			_, held = n.be.jobByKey(shard, spec.Key)
		}
		if !held && n.be.pendingJobs(shard, maxPending) >= maxPending {
			return Job{}, false, fmt.Errorf("node: enqueue %q: %w: shard %d holds %d pending jobs (MaxPendingJobs)", truncKey(spec.Key), ErrQueueFull, shard, maxPending)
		}
		maxPending = 0
	}
	job, created, err = n.be.enqueueJob(ctx, shard, spec, maxPending)
	if err != nil {
		return Job{}, false, fmt.Errorf("node: enqueue %q: %w", truncKey(spec.Key), err)
	}
	return job, created, nil
}

// StartJob commits the start of the next attempt of job (as last read:
// the attempt number is compared and swapped), fenced by tok, this node's
// token for the job's shard. It fails with ErrStaleToken if the shard moved
// past tok, ErrNotOwner while the shard is being handed over, and
// ErrJobState unless the job is runnable (see RunnableJobs: an attempt
// left behind by a previous owner of the shard counts). Commit the start before
// performing side effects; the returned job carries the attempt to
// complete or fail. The attempt times out after Config.JobTimeout.
func (n *Node) StartJob(ctx context.Context, tok Token, job Job) (Job, error) {
	if n.isClosed() {
		return Job{}, ErrClosed
	}
	j, err := n.be.startJob(ctx, tok, job.ID, job.Attempt, n.cfg.JobTimeout)
	if err != nil {
		return j, fmt.Errorf("node: start job %d: %w", job.ID, err)
	}
	return j, nil
}

// CompleteJob commits that the attempt started as job completed with
// result. It is fenced by the attempt's epoch and number: a job completes
// at most once, and never by an attempt that was superseded or whose
// shard moved on (ErrStaleToken, ErrJobState). A draining owner may still
// complete the attempts it started.
func (n *Node) CompleteJob(ctx context.Context, job Job, result []byte) (Job, error) {
	if n.isClosed() {
		return Job{}, ErrClosed
	}
	j, err := n.be.finishJob(ctx, job.Token(), job.ID, job.Attempt, jobOutcome{ok: true, result: result})
	if err != nil {
		return j, fmt.Errorf("node: complete job %d attempt %d: %w", job.ID, job.Attempt, err)
	}
	return j, nil
}

// FailJob commits that the attempt started as job failed because of
// reason. The job goes back to pending, startable again after backoff, or
// is dead-lettered when it has used its attempts. Fenced like CompleteJob.
func (n *Node) FailJob(ctx context.Context, job Job, reason string, backoff time.Duration) (Job, error) {
	if n.isClosed() {
		return Job{}, ErrClosed
	}
	j, err := n.be.finishJob(ctx, job.Token(), job.ID, job.Attempt, jobOutcome{reason: reason, backoff: max(backoff, 0)})
	if err != nil {
		return j, fmt.Errorf("node: fail job %d attempt %d: %w", job.ID, job.Attempt, err)
	}
	return j, nil
}

// ReadBarrier waits until this node's replica has applied every write
// committed before the call (a ReadIndex: the control-group leader answers
// its last log index after confirming its leadership with a quorum of
// voters). A replica read made after it returns — Job, JobByKey, Jobs —
// is linearizable: it reflects every write acknowledged before
// ReadBarrier was called. It needs cluster version 5 (ErrUnsupported
// before) and a reachable quorum (ErrNoQuorum when ctx ends first).
func (n *Node) ReadBarrier(ctx context.Context) error {
	if n.isClosed() {
		return ErrClosed
	}
	if err := n.be.readBarrier(ctx); err != nil {
		return fmt.Errorf("node: read barrier: %w", err)
	}
	return nil
}

// Job returns the job with id from this node's replica, or ErrJobNotFound
// (never enqueued, or dropped by retention after it finished). The replica
// may lag the leader: usually by a few commits, by seconds after a pause
// (docs/guarantees.md, "How far a replica's reads may lag").
func (n *Node) Job(id uint64) (Job, error) {
	j, ok := n.be.job(id)
	if !ok {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrJobNotFound)
	}
	return j, nil
}

// JobByKey returns the job enqueued with idempotency key key and shard key
// shardKey ("" meaning key, as in JobSpec), or ErrJobNotFound.
func (n *Node) JobByKey(shardKey, key string) (Job, error) {
	if shardKey == "" {
		shardKey = key
	}
	j, ok := n.be.jobByKey(n.ShardFor(shardKey), key)
	if !ok {
		return Job{}, fmt.Errorf("job %q: %w", key, ErrJobNotFound)
	}
	return j, nil
}

// Jobs returns the jobs q selects from this node's replica, sorted by shard
// then id.
func (n *Node) Jobs(q JobQuery) []Job { return n.be.jobs(q) }

// RunnableJobs returns the jobs of shard that its owner may start now,
// oldest first: pending ones past their backoff (Job.Runnable), and
// started ones whose attempt is abandoned — it began under an older epoch
// of the shard (a previous owner's attempt, already fenced out), or it
// timed out. This is the recovery of work a failed owner left behind: the
// next owner gets it at once, without waiting for Config.JobTimeout.
func (n *Node) RunnableJobs(shard uint32) []Job {
	now := time.Now()
	var epoch uint64
	if info, ok := n.be.shard(shard); ok {
		epoch = info.Epoch
	}
	var out []Job
	for _, j := range n.be.jobs(JobQuery{Shards: []uint32{shard}, States: []JobState{JobPending, JobStarted}}) {
		if runnableAt(j, epoch, now) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// WatchJobs subscribes to committed changes of the jobs q selects (Limit
// is ignored), with a buffer of buffer events; see Subscription for the
// buffering rules. Changes are coalesced: a watcher sees every job's
// latest state, but a job that moves twice between two looks of the node
// (e.g. started then completed in one batch) yields one event.
func (n *Node) WatchJobs(q JobQuery, buffer int) *Subscription[JobEvent] {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.jobSeen) == 0 {
		// Start tracking versions so only changes from now on are sent.
		for _, j := range n.be.jobs(JobQuery{}) {
			n.jobSeen[j.ID] = jobVersion{state: j.State, attempt: j.Attempt}
		}
	}
	return n.jobEvents.subscribe(buffer, func(ev JobEvent) bool { return q.match(ev.Job) })
}

// publishJobEvents diffs jobs against the last versions seen; n.mu held.
func (n *Node) publishJobEvents() {
	if !n.jobEvents.hasSubscribers() {
		return
	}
	// Jobs change only through commits: skip the diff when nothing new
	// was applied.
	idx := n.be.appliedIndex()
	if idx == n.jobIndex && idx != 0 {
		return
	}
	n.jobIndex = idx
	var evs []JobEvent
	for _, j := range n.be.jobs(JobQuery{}) {
		v := jobVersion{state: j.State, attempt: j.Attempt}
		old, ok := n.jobSeen[j.ID]
		if ok && old == v {
			continue
		}
		n.jobSeen[j.ID] = v
		evs = append(evs, JobEvent{Job: j, Created: !ok, Previous: old.state})
	}
	n.jobEvents.publish(evs...)
}

// checkJobSpec refuses, before anything is proposed, what the ledger would
// refuse to encode or apply: strings over ledger.MaxStringLen and payloads
// over maxPayload, the limit the replica applies with.
func checkJobSpec(spec JobSpec, maxPayload int) error {
	if n := len(spec.Key); n > ledger.MaxStringLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d: %w", ErrInvalid, n, ledger.MaxStringLen, ledger.ErrTooLarge)
	}
	if n := len(spec.Type); n > ledger.MaxStringLen {
		return fmt.Errorf("%w: type of %d bytes exceeds %d: %w", ErrInvalid, n, ledger.MaxStringLen, ledger.ErrTooLarge)
	}
	if n := len(spec.Payload); n > maxPayload {
		return fmt.Errorf("%w: payload of %d bytes exceeds %d: %w", ErrInvalid, n, maxPayload, ledger.ErrTooLarge)
	}
	if int64(spec.MaxAttempts) > math.MaxUint32 {
		return fmt.Errorf("%w: MaxAttempts %d exceeds %d", ErrInvalid, spec.MaxAttempts, uint32(1<<32-1))
	}
	return nil
}

// truncKey shortens a key for error messages.
func truncKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}

func (b *netBackend) maxPayload() int { return int(b.fsm.State().Settings().MaxPayload) }
