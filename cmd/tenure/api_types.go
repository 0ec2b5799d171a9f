package main

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// This file is the contract between the agent's HTTP API and the node it
// serves (agentNode), and the JSON shapes the API speaks. The operator
// commands decode the same types, so the CLI and the API cannot drift.

// agentNode is what the HTTP API needs from a running node. The agent
// adapts *node.Node to it (nodeadapter.go); the tests use fakeNode.
//
// Errors: methods wrap errUnavailable (no quorum, closed), errNotFound,
// errConflict or errBadInput so the API can pick a status code; anything
// else is reported as an internal error.
type agentNode interface {
	// Status is a snapshot of the node, its control group and members.
	Status() statusJSON
	// Shards returns every shard's committed record, sorted by shard.
	Shards() []shardJSON
	// Shard returns one shard; false if the shard does not exist.
	Shard(id uint32) (shardJSON, bool)
	// Members returns every known member, sorted by id.
	Members() []memberJSON
	// Elections returns the elections held on the cluster's shards,
	// sorted by name.
	Elections() []electionJSON
	// Health is the node's health report.
	Health() healthJSON
	// EnqueueJob enqueues a job; created is false when the idempotency key
	// matched an existing job, which is returned.
	EnqueueJob(ctx context.Context, req jobRequest) (job jobJSON, created bool, err error)
	// Job returns one job by id.
	Job(id string) (jobJSON, bool)
	// Jobs lists jobs matching q, sorted by id.
	Jobs(q jobQuery) []jobJSON
	// Drain moves every shard off the node and returns once it acts on
	// none, or ctx ends. Undrain makes it eligible again.
	Drain(ctx context.Context) error
	Undrain(ctx context.Context) error
	// Subscribe streams ownership changes until cancel is called. The
	// channel is closed when the node closes or after cancel.
	Subscribe() (events <-chan ownershipEvent, cancel func())
}

// Error classes agentNode methods wrap.
var (
	errUnavailable = errors.New("tenure: unavailable")
	errNotFound    = errors.New("tenure: not found")
	errConflict    = errors.New("tenure: conflict")
	errBadInput    = errors.New("tenure: bad input")
	// errQueueFull: the job's shard holds its cap of pending jobs (429).
	errQueueFull = errors.New("tenure: too many pending jobs")
)

// ownershipEvent is one change of a shard's committed owner, as a node saw it.
type ownershipEvent struct {
	Shard    uint32
	Epoch    uint64
	Owner    string // "" while unowned
	Previous string
	At       time.Time
}

// statusJSON is GET /v1/status.
type statusJSON struct {
	Node          string       `json:"node"`
	Group         string       `json:"group"`
	Incarnation   uint64       `json:"incarnation"`
	Profile       string       `json:"profile"`
	Partitions    int          `json:"partitions"`
	Version       string       `json:"version"`
	ControlLeader string       `json:"control_leader"`
	Voters        []string     `json:"voters"`
	AppliedIndex  uint64       `json:"applied_index"`
	Owned         int          `json:"owned"`
	Health        healthJSON   `json:"health"`
	Members       []memberJSON `json:"members"`
}

// healthJSON is a node's health report (/readyz, status).
type healthJSON struct {
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
	statusHealthy   = "healthy"
	statusDegraded  = "degraded"
	statusUnhealthy = "unhealthy"
)

// shardJSON is one shard (GET /v1/shards, /v1/shards/{id}).
type shardJSON struct {
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
}

// memberJSON is one member (GET /v1/members).
type memberJSON struct {
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
}

// electionJSON is one election (GET /v1/elections).
type electionJSON struct {
	Name   string `json:"name"`
	Shard  uint32 `json:"shard"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	State  string `json:"state"`
}

// jobRequest is the body of POST /v1/jobs. The job goes to the shard
// ShardKey hashes to, or Key's when ShardKey is empty; Key is also the
// idempotency key (unique per shard).
type jobRequest struct {
	Key         string          `json:"key"`
	ShardKey    string          `json:"shard_key,omitempty"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	MaxAttempts uint32          `json:"max_attempts,omitempty"`
}

// jobJSON is one job (GET /v1/jobs, /v1/jobs/{id}).
type jobJSON struct {
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

// jobQuery filters GET /v1/jobs.
type jobQuery struct {
	Shard *uint32
	State string // "" = any
	Limit int
}

// jobStates are the job states the API accepts in ?state=.
var jobStates = []string{"pending", "started", "completed", "dead"}

// jobsJSON is GET /v1/jobs: the jobs and the count per state of every
// job that matched the shard filter.
type jobsJSON struct {
	Jobs   []jobJSON      `json:"jobs"`
	Counts map[string]int `json:"counts"`
	// Next, when set, is the cursor of the next page: pass it as ?after=.
	Next string `json:"next,omitempty"`
}

// moveJSON is one entry of GET /v1/moves: a shard's committed owner
// changed, and why.
type moveJSON struct {
	At     time.Time `json:"at"`
	Shard  uint32    `json:"shard"`
	Epoch  uint64    `json:"epoch"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	// Cause is the serving node's reading of why, from the previous
	// owner's membership when the move was seen ("n3 draining", "n2
	// dead", "rebalance").
	Cause string `json:"cause"`
}

// drainJSON is the answer of POST /v1/drain and /v1/undrain.
type drainJSON struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	Done     bool   `json:"done"`
	Owned    int    `json:"owned"`
}

// errorJSON is every error body.
type errorJSON struct {
	Error string `json:"error"`
	// Code, when set, classifies the error for programs: "unauthorized",
	// "forbidden", "queue_full", "too_large", "invalid".
	Code string `json:"code,omitempty"`
}
