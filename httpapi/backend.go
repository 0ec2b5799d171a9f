package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// Backend is what the API serves. New adapts a *node.Node to it (Adapt);
// NewWithBackend serves any other implementation (the tests' fake, a node
// wrapped by the tenure agent).
//
// Errors: methods wrap ErrUnavailable (no quorum, closed), ErrNotFound,
// ErrConflict, ErrBadInput, ErrQueueFull or ErrNotImplemented so the API
// can pick a status code; anything else is reported as an internal error.
type Backend interface {
	// Status is a snapshot of the node, its control group and members.
	Status() apitypes.Status
	// Shards returns every shard's committed record, sorted by shard.
	Shards() []apitypes.Shard
	// Shard returns one shard; false if the shard does not exist.
	Shard(id uint32) (apitypes.Shard, bool)
	// ShardFor is the shard key hashes to.
	ShardFor(key string) uint32
	// Members returns every known member, sorted by id.
	Members() []apitypes.Member
	// Elections returns the elections held on the cluster's shards,
	// sorted by name.
	Elections() []apitypes.Election
	// Health is the node's health report.
	Health() apitypes.Health
	// EnqueueJob enqueues a job; created is false when the idempotency key
	// matched an existing job, which is returned.
	EnqueueJob(ctx context.Context, req apitypes.JobRequest) (job apitypes.Job, created bool, err error)
	// Job returns one job by id.
	Job(id string) (apitypes.Job, bool)
	// Jobs lists jobs matching q, sorted by id.
	Jobs(q JobQuery) []apitypes.Job
	// Drain moves every shard off the node and returns once it acts on
	// none, or ctx ends; it returns an error wrapping ErrNoEligibleNode
	// when shards remain and no other node can take them. Undrain makes
	// it eligible again.
	Drain(ctx context.Context) error
	Undrain(ctx context.Context) error
	// Subscribe streams ownership changes until cancel is called. The
	// channel is closed when the node closes or after cancel.
	Subscribe() (events <-chan OwnershipEvent, cancel func())
}

// RequestBackend is the optional part of a Backend that takes request ids
// and read barriers (cluster version 5; docs/api.md, "Idempotency keys"
// and "Consistent reads"). Without it an Idempotency-Key or
// ?consistent=true answers 501.
type RequestBackend interface {
	// EnqueueJobID is EnqueueJob carrying request id: a retry with the
	// same id answers the first try's result (created true for the
	// creating request); the id with another body fails with
	// ErrRequestIDReused.
	EnqueueJobID(ctx context.Context, req apitypes.JobRequest, id [16]byte) (job apitypes.Job, created bool, err error)
	// ReadBarrier returns once the node's replica applied every write
	// committed before the call.
	ReadBarrier(ctx context.Context) error
}

// KeyringBackend is the optional part of a Backend that manages its gossip
// keyring; without it /v1/keyring answers 501.
type KeyringBackend interface {
	GossipKeys() ([]apitypes.GossipKey, error)
	// GossipKeyOp runs one of apitypes.KeyringOps with key.
	GossipKeyOp(op string, key []byte) error
}

// ChangeBackend is the optional part of a Backend that says when its
// shard table may have changed. With it the metrics sampler re-reads
// Shards (every shard's record) only after a change instead of every
// Options.ObserveInterval, so a node at rest does not re-read thousands
// of records ten times a second.
type ChangeBackend interface {
	// ShardsGeneration is a number that moves whenever Shards may answer
	// differently in anything but LeaseRemainingMS and Load, at the
	// latest right after the change (0: unknown, read Shards). The
	// sampler reads it before Shards, so a change in between only makes
	// the next sample read Shards again.
	ShardsGeneration() uint64
	// Loads returns the loads of the shards this node owns, as Shards'
	// Load fields report them.
	Loads() []apitypes.ShardLoad
}

// ShardFeedBackend is the optional part of a ChangeBackend that says which
// shards changed: the metrics sampler then re-reads only those instead of
// every shard on every change (at 4,096 shards, that re-read on every
// commit of a busy cluster was the largest cost of a member:
// docs/benchmarks.md).
type ShardFeedBackend interface {
	// ShardsSince returns ShardsGeneration and, when it can tell, every
	// shard whose Shards answer (but LeaseRemainingMS and Load) may
	// differ from the one read at generation since, sorted by shard, and
	// true; false when it cannot (read Shards).
	ShardsSince(since uint64) (gen uint64, shards []apitypes.Shard, ok bool)
}

// UpgradeBackend is the optional part of a Backend that knows cluster
// versions; without it /v1/upgrade answers 501.
type UpgradeBackend interface {
	UpgradeStatus() (apitypes.UpgradeStatus, error)
	FinalizeUpgrade(ctx context.Context) (apitypes.UpgradeStatus, error)
}

// PlacementBackend is the optional part of a Backend that keeps operator
// placement rules (pins and exclusions); without it /v1/placement answers
// 501.
type PlacementBackend interface {
	PlacementRules() (apitypes.PlacementRules, error)
	// Pin pins a shard (or unpins it, with an empty node); Exclude
	// excludes a node or lifts its exclusion. Both wrap ErrConflict while
	// the cluster version does not allow them yet, ErrBadInput for a bad
	// shard or an unknown node.
	Pin(ctx context.Context, req apitypes.PinRequest) error
	Exclude(ctx context.Context, req apitypes.ExcludeRequest) error
}

// Error classes Backend methods wrap. Those the client tells apart too are
// apitypes' (the same values as client's).
var (
	ErrUnavailable = apitypes.ErrUnavailable
	ErrNotFound    = apitypes.ErrNotFound
	ErrConflict    = apitypes.ErrConflict
	ErrBadInput    = errors.New("tenure: bad input")
	// ErrQueueFull: the job's shard holds its cap of pending jobs (429).
	ErrQueueFull = apitypes.ErrQueueFull
	// ErrRequestIDReused: the Idempotency-Key was used for another request
	// body within the session window (422).
	ErrRequestIDReused = apitypes.ErrKeyReused
	// ErrForbidden: the control group refused the command for this node's
	// certificate (a member certificate proposing an operator action; 403).
	ErrForbidden = apitypes.ErrForbidden
	// ErrNotImplemented: the node cannot do this (501).
	ErrNotImplemented = errors.New("tenure: not supported by this node")
	// ErrNoEligibleNode: Drain returns it (wrapped) when the node still
	// acts on shards and no other node is eligible to take them over.
	ErrNoEligibleNode = errors.New("tenure: no other node is eligible to take the shards over")
)

// OwnershipEvent is one change of a shard's committed owner, as a node saw
// it: node's OwnerChanged event (Kind is node.OwnerChanged, or zero from a
// Backend that does not set it; the API reads only the other fields).
type OwnershipEvent = node.Event

// JobQuery filters Backend.Jobs.
type JobQuery struct {
	Shard *uint32
	State string // "" = any
	Limit int
}

// optional returns the handler's node as B, the interface of an optional
// capability, or answers 501 with why and false when the node lacks it.
func optional[B any](h *Handler, w http.ResponseWriter, why string) (B, bool) {
	b, ok := h.node.(B)
	if !ok {
		writeError(w, http.StatusNotImplemented, why)
	}
	return b, ok
}
