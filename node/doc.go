// Package node is tenure's embedded public API: start a node, learn which
// shards it owns with their fencing tokens, run workers only while owning,
// hold named elections, report health, process jobs exactly once and propose
// fenced application commands.
//
// It wires cluster/ (gossip and the Raft control group), ring/ (placement),
// ownership/ (the lease protocol) and ledger/ (the replicated state machine)
// together and is the only package besides cmd/ that uses the real clock.
//
// # Starting and stopping
//
// A process embeds one Node. DefaultConfig reads the node's identity from
// the environment ($HOSTNAME is the node id, $CLUSTER_NAME its group, as
// in a Kubernetes StatefulSet); add seeds, a data directory and addresses:
//
//	cfg := node.DefaultConfig()
//	cfg.Seeds = []string{"tenure-0.tenure:7946", "tenure-1.tenure:7946"}
//	cfg.DataDir = "/var/lib/tenure"
//	n, err := node.Start(ctx, cfg) // returns once the node is registered
//	...
//	defer n.Close(ctx)             // drains, hands shards over, leaves
//
// Config.Validate reports every bad value by name. Three timing profiles
// (ProfileFast, ProfileDefault, ProfileSafe) set the lease length, renewal
// period, clock drift margin and drain timeout (docs/protocol.md).
// Config.Network runs nodes in one process over a MemNetwork — the real
// product over in-memory transports and storage — for tests and examples.
//
// # Shards, owners and fencing tokens
//
// Keys (tenant ids, queue names, job keys) map to a fixed number of shards
// with ShardFor. Every shard has at most one committed owner per epoch; the
// epoch grows by one on every change of owner, so (shard, epoch) — a Token
// — is a fencing token: hand it to every system the owner writes to, and
// let that system refuse tokens older than the newest it has seen.
//
// A node acts on a shard (IsOwner, Token) only while it is the committed
// owner and its lease, measured by its own clock from the moment it asked
// for it and shortened by the drift margin, is still valid. When it cannot
// renew — partitioned away, control group down, process paused — it stops
// acting before the lease ends, and the control group grants the shard to
// someone else only after the lease has certainly ended. Two nodes
// therefore never act on one shard at the same instant (under the stated
// clock-rate assumption); the token protects everything else.
//
// Owner tells who the committed owner is, LeaseRemaining how long this node
// may act without a renewal, Shards and Status give the whole picture.
// Subscribe delivers ShardAcquired, ShardLost and OwnerChanged events.
//
// # Events and subscriptions
//
// The node never calls application code from its goroutines. Events arrive
// on a Subscription's channel, which has a fixed buffer: when a slow
// subscriber lets it fill, further events are dropped and counted by
// Dropped, and the subscriber should re-read the state it tracks. Close a
// subscription when done; closing the node closes its channel.
//
// # Workers
//
// RunShard, RunLeader and RunPerShard run a WorkFunc while this node owns
// a shard or leads an election. The function gets the term's Token and a
// context that is cancelled when the term ends, before the lease does, and
// runs again when ownership returns. A revoked shard is handed over only
// after its workers have returned (or its drain timeout has passed), so a
// worker can finish in-flight work — commit a job's result, flush a batch —
// after its context is cancelled, still under the same token.
//
// GroupPosition returns a node's index and count among its group's live
// members, for code written for "worker i of n"; RunPerShard is the better
// form because its split is fenced.
//
// # Elections
//
// Election(name) is a cluster-wide election and GroupElection(ctx, name)
// one per group (its leader is always a member of the caller's group). An
// election is a shard: its leader is the shard's acting owner, and it
// inherits leases, handover, health-based step-down and fencing tokens.
// IsLeader, Leader, Token, Events, WaitLeader, Resign and Candidates cover
// what other leader-election libraries offer, without a database.
//
// # Health
//
// SetHealth gossips a score in [0, 1] and metadata. A node below
// Config.MinHealth is not eligible: the control group revokes its shards
// and elections (it drains them and steps down) and gives it none until it
// recovers. Candidates lists every node's standing. Health reports
// Healthy, Degraded or Unhealthy with reasons: no control-group quorum,
// lease renewals failing or expired, a revoked shard wedged past its drain
// timeout, a low score, draining.
//
// # Jobs
//
// Jobs are committed records on a shard: Enqueue (idempotent by key),
// StartJob (by the shard's owner, fenced by its token: a new attempt),
// CompleteJob or FailJob (fenced by the attempt), Job, Jobs, RunnableJobs
// and WatchJobs. Commit the start before a side effect and the result after
// it; pass Job.ID or Job.AttemptToken as the side effect's idempotency key.
// A job is completed at most once, and work left by an owner that failed or
// timed out is offered to the next owner by RunnableJobs. See docs/jobs.md.
//
// # Application commands
//
// Register StateMachines in Config; Propose commits a typed command for a
// shard fenced by its token, and every node applies every committed command
// in log order. A command proposed with a stale token is rejected and
// applied nowhere. State machines take part in snapshots, so a restarted
// node rebuilds its state from the last snapshot plus the log after it.
//
// # Errors
//
// Errors wrap the package's sentinel errors (ErrClosed, ErrNotOwner,
// ErrStaleToken, ErrNotLeader, ErrNoQuorum, ...): test them with
// errors.Is. Blocking calls take a context first and return its error
// (context.Cause) when it ends.
package node
