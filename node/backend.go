package node

import (
	"context"
	"time"
)

// backend is everything a Node needs from the layers below it (gossip,
// control group, ledger, ownership). Node holds the public API's logic —
// events, workers, elections, health reports, job and command helpers —
// and reaches the cluster only through this seam, so it is unit-tested
// against memBackend and runs on the real stack unchanged.
//
// Concurrency: every method may be called from any goroutine. The backend
// calls the notify function it was built with (never blocking, possibly
// from its own goroutines) whenever committed state, membership or this
// node's acting set may have changed.
type backend interface {
	// incarnation is this process's incarnation of the node id.
	incarnation() uint64
	// appliedIndex is the last log index this node's replica applied.
	appliedIndex() uint64

	// shard returns the committed record of s (Acting and LeaseRemaining
	// are filled by Node, not here).
	shard(s uint32) (ShardInfo, bool)
	// shards returns every committed shard record, sorted by shard.
	shards() []ShardInfo
	// shardsSince reads one replica state: its ledger.State.
	// OwnershipGeneration, and the records of the shards whose record or
	// owner validity may differ from the state of generation since (the
	// ledger's change feed), sorted by shard — or every record, with full,
	// when the feed cannot tell (since 0, too old, a snapshot or a
	// table-wide change in between).
	shardsSince(since uint64) (gen uint64, recs []ShardInfo, full bool)
	// acting reports whether this node may act on s at now by the lease
	// protocol (docs/protocol.md, node side, rule 4), at which epoch, until
	// when (by this node's clock) unless renewed, and whether the shard is
	// being revoked (the node may then act only to drain it).
	acting(s uint32, now time.Time) (a actingState, ok bool)
	// token reports the fencing epoch of s if this node may start work on
	// it at now, and the local time it stops being handed out: the agent's
	// rule (ownership.Agent.Token: acting, not revoking, and at least
	// Agent.Guard before the lease ends) over the acting set its
	// Ready.Changes reported (acting.go).
	token(s uint32, now time.Time) (epoch uint64, until time.Time, ok bool)
	// working is every shard token would answer for at now, sorted by
	// shard: the acting set the agent's Ready.Changes reported.
	working(now time.Time) []Token
	// resigned records that the application gave s up at epoch
	// (Election.Resign): acting reports it stopped at once, and this node
	// never acts on s at that epoch again.
	resigned(s uint32, epoch uint64)

	// members is gossip's view of every node, sorted by id.
	members() []Member
	// draining reports whether this node is draining, as its entry in
	// members shows it (gossip's flag or the ledger's); cheap, for health
	// reports.
	draining() bool
	// liveNodes is the sorted ids of nodes whose committed liveness is valid.
	liveNodes() []string
	// control reports the control group as this node sees it.
	control() controlInfo
	// lease reports this node's lease renewals.
	lease() leaseInfo

	// setHealth gossips this node's health score and metadata.
	setHealth(score float64, meta map[string]string) error
	// setLoad gossips this node's load summary (load.go's format).
	setLoad(summary string) error
	// setDraining commits this node's draining flag.
	setDraining(ctx context.Context, draining bool) error
	// handoff is called once this node has stopped acting on revoked
	// shards (their workers returned): the backend proposes a Transfer to
	// each revocation's target, or a Release (protocol rule 5), all in one
	// batch.
	handoff(ctx context.Context, shards []shardEpoch) error
	// resign gives up s at epoch after this node stopped acting on it; the
	// control group should not grant it straight back.
	resign(ctx context.Context, s uint32, epoch uint64) error
	// electionShard maps a group-scoped election to its shard, declaring
	// it in the ledger the first time.
	electionShard(ctx context.Context, group, name string) (uint32, error)

	// propose commits an application command fenced by tok, carrying
	// request id (zero: the backend may draw one) when the cluster runs
	// ledger.VersionRequestIDs.
	propose(ctx context.Context, tok Token, typ string, payload []byte, id RequestID) (Applied, error)

	// Job commands. Errors wrap ErrStaleToken, ErrNotOwner, ErrJobState,
	// ErrJobNotFound; the returned job is the current record when known.
	// enqueueJob commits spec on shard; maxPending > 0 travels in the
	// command for the ledger to decide the cap (cluster version 5).
	enqueueJob(ctx context.Context, shard uint32, spec JobSpec, maxPending int) (Job, bool, error)
	// versionActive reports whether this node's replica shows the cluster
	// running version v.
	versionActive(v uint32) bool
	// readBarrier waits until this node's replica applied every write
	// committed before the call (ReadIndex; cluster version 5).
	readBarrier(ctx context.Context) error
	startJob(ctx context.Context, tok Token, id uint64, attempt uint32, timeout time.Duration) (Job, error)
	finishJob(ctx context.Context, tok Token, id uint64, attempt uint32, out jobOutcome) (Job, error)
	job(id uint64) (Job, bool)
	jobByKey(shard uint32, key string) (Job, bool)
	// maxPayload is the job payload limit this node's replica applies
	// with (ledger.LedgerSettings.MaxPayload: the logged one once the
	// cluster committed LogSettings).
	maxPayload() int
	// pendingJobs counts the shard's pending jobs in this node's replica,
	// stopping at limit when limit > 0.
	pendingJobs(shard uint32, limit int) int
	// jobs returns the jobs q selects sorted by shard, then id.
	jobs(q JobQuery) []Job

	// close leaves the cluster and releases resources. Node drains first.
	close(ctx context.Context) error
}

// actingState is the lease protocol's verdict for one shard.
type actingState struct {
	epoch    uint64
	until    time.Time
	revoking bool
}

// controlInfo is the control group as this node sees it.
type controlInfo struct {
	leader   string   // leader's node id, "" if unknown
	voters   []string // sorted voter ids
	quorum   bool     // a leader is known and was heard from recently
	isLeader bool
	// halted describes the committed entry this node's replica could not
	// read and stopped at ("" while it applies normally).
	halted   string
	haltedAt uint64 // its log index (0 while applying)
	// stream is the node's part in the committed-state stream.
	stream StreamStatus
}

// leaseInfo is the state of this node's heartbeats.
type leaseInfo struct {
	registered   bool      // a heartbeat was accepted since start
	leaseEnd     time.Time // local time until which the node may act
	lastAck      time.Time // last accepted heartbeat
	failing      int       // consecutive failed or rejected heartbeats
	fenced       bool      // a newer incarnation of this node is registered
	conflict     error     // ErrIdentityConflict: fenced before ever registering
	wedgedShards []uint32  // shards revoked from us we have not released past the drain timeout
}

// jobOutcome is how an attempt ended.
type jobOutcome struct {
	ok      bool
	result  []byte
	reason  string
	backoff time.Duration
}
