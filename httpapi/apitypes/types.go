// Package apitypes holds the JSON shapes of tenure's versioned HTTP API
// (/v1/...): what package httpapi serves and package client decodes. It
// imports nothing of tenure, so a client stays light.
package apitypes

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode"
)

// Status is GET /v1/status.
type Status struct {
	Node          string   `json:"node"`
	Group         string   `json:"group"`
	Incarnation   uint64   `json:"incarnation"`
	Profile       string   `json:"profile"`
	Partitions    int      `json:"partitions"`
	Version       string   `json:"version"`
	ControlLeader string   `json:"control_leader"`
	Voters        []string `json:"voters"`
	AppliedIndex  uint64   `json:"applied_index"`
	Owned         int      `json:"owned"`
	Health        Health   `json:"health"`
	Members       []Member `json:"members"`
	// Stream is the node's part in the committed-state stream (cluster
	// version 5): a member's lag, a voter's subscribers. Omitted by
	// servers that predate it.
	Stream *Stream `json:"stream,omitempty"`
}

// Stream is a node's part in the committed-state stream (GET /v1/status).
type Stream struct {
	// Following: a member that follows the stream (out of Raft).
	Following bool   `json:"following"`
	Server    string `json:"server,omitempty"`
	// LagEntries and LagMS: how far its replica is behind the serving
	// voter (log indexes, and time since it last had caught up).
	LagEntries    uint64    `json:"lag_entries"`
	LagMS         int64     `json:"lag_ms"`
	CaughtUp      time.Time `json:"caught_up,omitempty"`
	Reconnects    uint64    `json:"reconnects"`
	Snapshots     uint64    `json:"snapshots"`
	BytesReceived uint64    `json:"bytes_received"`
	// Subscribers and BytesSent: a voter's side.
	Subscribers int64  `json:"subscribers"`
	BytesSent   uint64 `json:"bytes_sent"`
}

// Health is a node's health report (/readyz, status).
type Health struct {
	// Status is "healthy", "degraded" or "unhealthy".
	Status           string    `json:"status"`
	Reasons          []string  `json:"reasons"`
	ControlLeader    string    `json:"control_leader"`
	LastRenewal      time.Time `json:"last_renewal"`
	LeaseRemainingMS int64     `json:"lease_remaining_ms"`
	Score            float64   `json:"score"`
	// ReplicaHaltedAt is the log index the node's replica stopped at (an
	// entry its binary cannot read), omitted while it applies.
	ReplicaHaltedAt uint64 `json:"replica_halted_at,omitempty"`
}

// The health statuses.
const (
	StatusHealthy   = "healthy"
	StatusDegraded  = "degraded"
	StatusUnhealthy = "unhealthy"
)

// Shard is one shard (GET /v1/shards, /v1/shards/{id}).
type Shard struct {
	Shard uint32 `json:"shard"`
	Owner string `json:"owner"`
	Epoch uint64 `json:"epoch"`
	// State is "unowned", "owned" or "revoking".
	State  string `json:"state"`
	Valid  bool   `json:"valid"`
	Target string `json:"target,omitempty"`
	// Acting and LeaseRemainingMS are the serving node's own view: whether
	// it acts on the shard and for how long without renewing.
	Acting           bool      `json:"acting"`
	LeaseRemainingMS int64     `json:"lease_remaining_ms"`
	Election         string    `json:"election,omitempty"`
	ChangedAt        time.Time `json:"changed_at"`
	Reason           string    `json:"reason"`
	// Load is the load the serving node reported for the shard, when it
	// owns it and reports one (node.ReportLoad).
	Load *float64 `json:"load,omitempty"`
	// Fenced reports that the shard is under fenced takeover (GET
	// /v1/fenced): its successor may be granted before the owner's lease
	// ends, so two owners may act at once and only the token tells the
	// stale one's writes apart (S4 waived; docs/guarantees.md).
	Fenced bool `json:"fenced"`
}

// Owner is GET /v1/owner?key=K: the shard a key hashes to and that
// shard's committed owner, as the serving node sees it.
type Owner struct {
	Key   string `json:"key"`
	Shard uint32 `json:"shard"`
	// Owner is the committed owner ("" while unowned); Valid is false when
	// its lease has lapsed (a failover is due).
	Owner string `json:"owner"`
	Epoch uint64 `json:"epoch"`
	State string `json:"state"`
	Valid bool   `json:"valid"`
	// HTTPAddr is the owner's advertised HTTP address ("" when unknown or
	// unowned).
	HTTPAddr string `json:"http_addr,omitempty"`
}

// Member is one member (GET /v1/members).
type Member struct {
	ID          string            `json:"id"`
	Group       string            `json:"group"`
	Incarnation uint64            `json:"incarnation"`
	Addr        string            `json:"addr"`
	RaftAddr    string            `json:"raft_addr"`
	HTTPAddr    string            `json:"http_addr"`
	State       string            `json:"state"`
	Health      float64           `json:"health"`
	Draining    bool              `json:"draining"`
	Live        bool              `json:"live"`
	Voter       bool              `json:"voter"`
	Leader      bool              `json:"leader"`
	Version     string            `json:"version"`
	Tags        map[string]string `json:"tags,omitempty"`
	// LastHeartbeat is the member's last committed heartbeat, by its own
	// clock (absent when unknown).
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
	// LeaseRemainingMS is how long that heartbeat lets the member act,
	// as the serving node reads it (0 once it has run out).
	LeaseRemainingMS int64 `json:"lease_remaining_ms"`
	// Suspected is true as soon as something is wrong, before the control
	// group commits it: gossip suspects the member or finds it dead, or
	// its heartbeats stopped (none for half a lease).
	Suspected bool `json:"suspected"`
	// Weight and Zone are the member's placement capacity (1 if unset)
	// and failure domain; Excluded: an operator excluded it from placement.
	Weight   int    `json:"weight,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Excluded bool   `json:"excluded,omitempty"`
	// Unproven: gossip lists the member, but it has not proven its id at
	// its Raft address over TLS, so the control group ignores it (as the
	// leader sees it; docs/security.md).
	Unproven bool `json:"unproven,omitempty"`
	// Load is the member's gossiped total load and HotShards its hottest
	// shards (node.ReportLoad); absent when it reports none.
	Load      *float64    `json:"load,omitempty"`
	HotShards []ShardLoad `json:"hot_shards,omitempty"`
}

// ShardLoad is one shard's reported load.
type ShardLoad struct {
	Shard uint32  `json:"shard"`
	Load  float64 `json:"load"`
}

// Election is one election (GET /v1/elections).
type Election struct {
	Name   string `json:"name"`
	Shard  uint32 `json:"shard"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	State  string `json:"state"`
}

// HeaderIdempotencyKey is the request header of POST /v1/jobs that names
// one logical request across its retries
// (draft-ietf-httpapi-idempotency-key-header; docs/api.md). A server that
// honoured it echoes it in the answer.
const HeaderIdempotencyKey = "Idempotency-Key"

// JobRequest is the body of POST /v1/jobs. The job goes to the shard
// ShardKey hashes to, or Key's when ShardKey is empty; Key is also the
// idempotency key (unique per shard).
type JobRequest struct {
	Key         string          `json:"key"`
	ShardKey    string          `json:"shard_key,omitempty"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	MaxAttempts uint32          `json:"max_attempts,omitempty"`
}

// Job is one job (GET /v1/jobs, /v1/jobs/{id}).
type Job struct {
	ID          string          `json:"id"`
	Shard       uint32          `json:"shard"`
	Key         string          `json:"key"`
	Type        string          `json:"type"`
	State       string          `json:"state"`
	Attempt     uint32          `json:"attempt"`
	MaxAttempts uint32          `json:"max_attempts"`
	Owner       string          `json:"owner"`
	Epoch       uint64          `json:"epoch"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	LastError   string          `json:"last_error,omitempty"`
	EnqueuedAt  time.Time       `json:"enqueued_at"`
}

// JobStates are the job states the API accepts in ?state=.
var JobStates = []string{"pending", "started", "completed", "dead"}

// JobList is GET /v1/jobs: the jobs and the count per state of every job
// that matched the shard filter.
type JobList struct {
	Jobs   []Job          `json:"jobs"`
	Counts map[string]int `json:"counts"`
	// Next, when set, is the cursor of the next page: pass it as ?after=.
	Next string `json:"next,omitempty"`
}

// Move is one entry of GET /v1/moves: a shard's committed owner changed,
// and why.
type Move struct {
	At     time.Time `json:"at"`
	Shard  uint32    `json:"shard"`
	Epoch  uint64    `json:"epoch"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	// Cause is the serving node's reading of why: from the ledger's
	// reason when it names one ("owner n5 expired" → "n5 lease expired"),
	// else from the previous owner's membership when the move was seen
	// ("drain of n4", "n2 dead", "rebalance"). A failover's grant is the
	// move From the owner whose lease lapsed, not a "first owner".
	Cause string `json:"cause"`
}

// Drain is the answer of POST /v1/drain and /v1/undrain.
type Drain struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	// Done: the node acts on no shard (Owned is 0).
	Done bool `json:"done"`
	// Owned is how many shards the node still acts on.
	Owned int `json:"owned"`
	// OthersEligible reports whether another node can take shards over.
	// A drain of the last eligible node answers Done false with
	// OthersEligible false: its shards stay where they are (and move as
	// soon as another node becomes eligible).
	OthersEligible bool `json:"others_eligible"`
	// Reason explains an answer that is not Done.
	Reason string `json:"reason,omitempty"`
}

// GossipKey is one key of a node's gossip keyring: its fingerprint, never
// the key.
type GossipKey struct {
	Fingerprint string `json:"fingerprint"`
	Primary     bool   `json:"primary"`
}

// Keyring is GET /v1/keyring and the answer to a keyring operation.
type Keyring struct {
	Node string      `json:"node"`
	Keys []GossipKey `json:"keys"`
}

// KeyringRequest is the body of POST /v1/keyring/{op}.
type KeyringRequest struct {
	Key string `json:"key"` // base64, 16, 24 or 32 bytes
}

// KeyringOps are the operations of POST /v1/keyring/{op}.
var KeyringOps = []string{"install", "use", "remove"}

// NodeVersions is the cluster versions one registered node's binary
// speaks (GET /v1/upgrade).
type NodeVersions struct {
	ID       string `json:"id"`
	Min      uint32 `json:"min"`
	Max      uint32 `json:"max"`
	Live     bool   `json:"live"`
	Blocking bool   `json:"blocking"` // holds the cluster below this binary's newest version
}

// UpgradeStatus is the cluster version as the answering node's replica
// sees it: GET /v1/upgrade and the answer of POST /v1/upgrade/finalize
// (docs/upgrades.md). node.UpgradeStatus is this type.
type UpgradeStatus struct {
	// Active is the cluster's active version: every node runs in its mode.
	Active uint32 `json:"active"`
	// BinaryMin and BinaryMax are the versions the node's binary speaks.
	BinaryMin uint32 `json:"binary_min"`
	BinaryMax uint32 `json:"binary_max"`
	// Target is the newest version every live node speaks (capped at
	// BinaryMax): finalizing moves Active to it.
	Target uint32 `json:"target"`
	// Blockers are the live nodes that keep Target below BinaryMax.
	Blockers []string `json:"blockers"`
	// Nodes are the registered nodes and their ranges.
	Nodes []NodeVersions `json:"nodes"`
	// ManualFinalize: the leader waits for FinalizeUpgrade.
	ManualFinalize bool `json:"manual_finalize"`
	// FinalizedAt is when the active version was set (zero before).
	FinalizedAt time.Time `json:"finalized_at"`
}

// ErrorBody is every error answer's body.
type ErrorBody struct {
	Error string `json:"error"`
	// Code, when set, classifies the error for programs: one of the Code
	// constants (or, from a routing node, a RouteError code).
	Code string `json:"code,omitempty"`
}

// The ErrorBody codes: the server sends each with its CodeStatus, and the
// client tells its errors apart by them (client.ErrQueueFull,
// client.ErrKeyReused).
const (
	CodeInvalid      = "invalid"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeTooLarge     = "too_large"
	CodeKeyReused    = "idempotency_key_reused"
	CodeQueueFull    = "queue_full"
)

// CodeStatus is the HTTP status an answer with each code carries.
var CodeStatus = map[string]int{
	CodeInvalid:      http.StatusBadRequest,
	CodeUnauthorized: http.StatusUnauthorized,
	CodeForbidden:    http.StatusForbidden,
	CodeTooLarge:     http.StatusRequestEntityTooLarge,
	CodeKeyReused:    http.StatusUnprocessableEntity,
	CodeQueueFull:    http.StatusTooManyRequests,
}

// CheckToken refuses bearer tokens that cannot travel in a header intact.
func CheckToken(s string) error {
	if len(s) > 4096 {
		return errors.New("longer than 4096 bytes")
	}
	for _, r := range s {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return errors.New("contains white space, control or non-ASCII characters")
		}
	}
	return nil
}

// Pin is one operator pin (GET /v1/placement).
type Pin struct {
	Shard  uint32    `json:"shard"`
	Node   string    `json:"node"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Exclusion is one excluded node (GET /v1/placement).
type Exclusion struct {
	Node   string    `json:"node"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// PlacementRules is GET /v1/placement and the answer of its POSTs.
type PlacementRules struct {
	Pins     []Pin       `json:"pins"`
	Excluded []Exclusion `json:"excluded"`
}

// PinRequest is POST /v1/placement/pin: pin Shard to Node, or remove its
// pin when Node is empty.
type PinRequest struct {
	Shard  uint32 `json:"shard"`
	Node   string `json:"node"`
	Reason string `json:"reason,omitempty"`
}

// ExcludeRequest is POST /v1/placement/exclude: exclude Node from
// placement (Exclude true) or lift its exclusion (false).
type ExcludeRequest struct {
	Node    string `json:"node"`
	Exclude bool   `json:"exclude"`
	Reason  string `json:"reason,omitempty"`
}

// Revocation is one entry of the committed deny-list: a node id, a
// certificate serial (lowercase hex), or both (docs/security.md,
// "Revoking a node").
type Revocation struct {
	Node   string    `json:"node,omitempty"`
	Serial string    `json:"serial,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Revocations is GET /v1/revocations and the answer of its POST.
type Revocations struct {
	Revoked []Revocation `json:"revoked"`
}

// RevokeRequest is POST /v1/revocations (admin scope): put Node and/or
// Serial on the deny-list, or take that entry off (Lift).
type RevokeRequest struct {
	Node   string `json:"node,omitempty"`
	Serial string `json:"serial,omitempty"`
	Reason string `json:"reason,omitempty"`
	Lift   bool   `json:"lift,omitempty"`
}
