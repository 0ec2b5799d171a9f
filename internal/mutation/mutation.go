// Package mutation holds the switches that disable one safety rule each in
// the real code (ownership, ledger). They exist only so that the simulator's
// tests can prove the harness catches every broken rule; production code
// never sets them. Being internal, they are not part of tenure's public API.
//
// The switches are compiled in only under the build tag "mutations"
// (switch_on.go). Without it (every production build) Enabled is false and
// On is a function returning the constant false, which the compiler
// inlines, so every `!mutation.On(...)` guard folds away; Set panics.
// Tests that turn a switch on skip without the tag (see Enabled); `make
// test` and `make mutations` run them with -tags mutations.
package mutation

// Switch names one disabled safety rule.
type Switch int32

// The switches. Each disables exactly one rule of docs/protocol.md or of the
// ledger's command table (docs/ledger.md).
const (
	// None: every rule in force.
	None Switch = iota
	// SkipExpiryWait: the planner expires a node without waiting
	// Lease·(1+δ) since its last heartbeat.
	SkipExpiryWait
	// SkipTakeoverWait: the planner grants a Revoking shard away without
	// waiting (Lease+Drain)·(1+δ) since it saw the Revoke.
	SkipTakeoverWait
	// RenewFromAck: the tracker counts the lease from when the heartbeat was
	// acknowledged instead of when it was asked.
	RenewFromAck
	// ResumeAfterHandoff: the tracker may act on a Revoking shard again
	// after it proposed its Release/Transfer, if a renewal reopens its lease
	// within the drain window (the protocol flaw the simulator found).
	ResumeAfterHandoff
	// SkipApplyWait: the tracker extends its lease on a heartbeat ack before
	// its own replica has applied the heartbeat's log index.
	SkipApplyWait
	// IgnoreEstablish: a new leader does not wait out leases and drains it
	// could not see: it treats every node as last seen, and every Revoke as
	// seen, a full wait before it became leader.
	IgnoreEstablish
	// NoDriftMargin: the tracker counts its lease as the full Lease instead
	// of Lease·(1−δ), and the leader waits only Lease.
	NoDriftMargin
	// AcceptStaleEpoch: the ledger accepts a Grant whose expected epoch is
	// not the shard's current epoch.
	AcceptStaleEpoch
	// IgnoreDrainDeadline: the tracker keeps acting on a Revoking shard past
	// its drain deadline.
	IgnoreDrainDeadline

	// The ledger FSM's validation rules (docs/ledger.md, the command
	// table), one switch each, read where the rule lives in ledger/fsm.go.

	// HeartbeatStaleIncarnation: a Heartbeat with a lower incarnation than
	// the stored one renews the record (instead of ErrStaleIncarnation).
	HeartbeatStaleIncarnation
	// HeartbeatStaleLiveness: a Heartbeat at another liveness epoch renews
	// the record (instead of ErrStaleLiveness): an expired node renews.
	HeartbeatStaleLiveness
	// ExpireIgnoreSeq: ExpireNode's compare-and-set ignores Seq, so it
	// expires a node whose heartbeat landed first.
	ExpireIgnoreSeq
	// DrainingStaleIncarnation: SetDraining from another incarnation is
	// accepted.
	DrainingStaleIncarnation
	// GrantOverValidOwner: a Grant (without Takeover of a Revoking shard)
	// is accepted while the shard's ownership is valid (ErrShardOwned).
	GrantOverValidOwner
	// GrantEmptyOwner: a Grant to the empty node id is not refused as
	// invalid (nor as an unknown grantee): the shard is granted to "".
	GrantEmptyOwner
	// NewOwnerUnchecked: Grant and Transfer do not check the grantee's
	// NodeRecord against its (incarnation, liveness).
	NewOwnerUnchecked
	// RevokeStaleEpoch: a Revoke for another epoch is accepted.
	RevokeStaleEpoch
	// RevokeNotOwned: a Revoke of a shard that is not Owned (already
	// Revoking, or Unowned) is accepted.
	RevokeNotOwned
	// ReleaseStaleEpoch: a Release for another epoch is accepted.
	ReleaseStaleEpoch
	// ReleaseNotOwner: a Release by a node that is not the owner is
	// accepted.
	ReleaseNotOwner
	// ReleaseTwice: a Release of an Unowned shard is accepted again.
	ReleaseTwice
	// TransferStaleEpoch: a Transfer for another epoch is accepted.
	TransferStaleEpoch
	// TransferInvalidOwner: a Transfer from a node that is not the shard's
	// valid owner is accepted.
	TransferInvalidOwner
	// JobStartNotOwner: a JobStart from a node that is not the shard's
	// valid owner is accepted.
	JobStartNotOwner
	// JobStartRevoking: a JobStart on a Revoking shard is accepted.
	JobStartRevoking
	// JobStartStaleEpoch: a JobStart at another epoch is accepted.
	JobStartStaleEpoch
	// JobStartWrongAttempt: a JobStart whose Attempt is not the job's is
	// accepted.
	JobStartWrongAttempt
	// JobStartFinished: a finished job is started again.
	JobStartFinished
	// JobStartRunning: a job whose attempt is running (current epoch, not
	// timed out) is started again: two attempts run at once.
	JobStartRunning
	// JobStartBackoff: a Pending job is started before its NotBefore.
	JobStartBackoff
	// FinishStaleEpoch: JobComplete/JobFail at another epoch than the
	// shard's (or the attempt's) is accepted.
	FinishStaleEpoch
	// FinishInvalidOwner: JobComplete/JobFail is accepted while the shard's
	// ownership is not valid.
	FinishInvalidOwner
	// FinishWrongAttempt: JobComplete/JobFail for another attempt is
	// accepted.
	FinishWrongAttempt
	// FinishFinished: JobComplete/JobFail of a finished job is not refused
	// (neither with ErrJobFinished nor for its state): it finishes again,
	// a job completed twice.
	FinishFinished
	// FailNoDeadLetter: a JobFail of the last allowed attempt makes the job
	// Pending again instead of Dead.
	FailNoDeadLetter
	// EnqueueDuplicateKey: a keyed JobEnqueue creates a second job for a
	// key that is already retained.
	EnqueueDuplicateKey
	// AppStaleEpoch: an App command at another epoch is applied.
	AppStaleEpoch
	// AppInvalidOwner: an App command is applied while the shard's
	// ownership is not valid.
	AppInvalidOwner

	// Protocol rules registered after the ledger's (issue 14).

	// ActOnRevoking: the tracker starts acting on a Revoking shard it was
	// not acting on when it first saw the Revoke.
	ActOnRevoking
	// TakeoverWithoutDrain: the planner takes a Revoking shard over after
	// Lease·(1+δ) since it saw the Revoke, not (Lease+Drain)·(1+δ): it does
	// not wait for the owner's drain window.
	TakeoverWithoutDrain
	// DrainIgnoresLease: the tracker keeps acting on a Revoking shard until
	// its drain deadline even after its lease ended.
	DrainIgnoresLease
	// FencedTakeoverUnfenced: the ledger accepts a Grant with Takeover
	// over a valid Owned owner of a shard that is not under the
	// fenced-takeover policy (fenced takeover, cluster version 4).
	FencedTakeoverUnfenced

	// Lease renewals off the log (issue 15, cluster version 4).

	// RenewWithoutConfirm: the leader acks a renewal without a quorum
	// confirm round.
	RenewWithoutConfirm
	// RenewWithoutApplyWait: the tracker extends its lease on a renewal
	// ack before its replica applied the ack's commit index.
	RenewWithoutApplyWait
	// EstablishIgnoresBound: a new leader counts every node as last seen a
	// Lease before its bound (it trusts nothing it cannot see).
	EstablishIgnoresBound
	// RenewWhileExpiring: the planner accepts renewals of a node whose
	// ExpireNode it proposed and has not seen apply (no expiring mark).
	RenewWhileExpiring

	// Issue 26: every rule of docs/guarantees.md can fail.

	// AckBeforeCommit: the simulated control group (simulation/raft.go)
	// acknowledges a proposal when the leader appended it, before it is
	// durable on a majority of the voters (S3).
	AckBeforeCommit
	// LeaveExpiredShards: the planner does not grant a shard whose owner's
	// ownership is no longer valid (expired or restarted owner); only
	// Unowned shards are granted (L1).
	LeaveExpiredShards
	// NoRebalance: the planner never revokes a shard to rebalance (only
	// from owners that left the ring), so a node that joins or returns
	// stays under its quota (L2).
	NoRebalance
	// NoHandoff: a draining owner never proposes its Release or Transfer;
	// every planned move ends with the leader's takeover wait (L3).
	NoHandoff
	// SessionDedupOff: the ledger applies a Session's command again when
	// its request id is in the session table, instead of answering the
	// first result.
	SessionDedupOff
	// RequestIDIgnored: the ledger answers a Session from the table by its
	// request id alone, ignoring that the id was used for another command
	// (kind or shard), instead of refusing it (ErrInvalid).
	RequestIDIgnored
	// ClusterVersionDown: a ClusterConfig may lower the cluster version.
	ClusterVersionDown
	// GatedWhileMixed: the ledger applies a command gated at a cluster
	// version (LogSettings, SetTakeoverPolicy, ForgetNode,
	// ClaimIncarnation) while the cluster runs an older one, as in a
	// rolling upgrade not yet finalized (ErrVersion).
	GatedWhileMixed

	// The committed-state stream (issue 24, cluster version 5).

	// StreamResumeSkips: a member whose stream broke resumes from the
	// serving voter's applied index instead of its own (a watch resumed
	// from "now"): the entries committed meanwhile never reach its replica.
	StreamResumeSkips

	// Least privilege (issue 25, cluster version 5): the simulator has no
	// certificates, so a named test catches each (TestMutations runs it
	// under the switch, TENURE_MUTATION; simulation.testCaught).

	// MemberProposesOperatorKinds: ledger.Authorize lets a member
	// certificate propose operator actions (PinShard, ExcludeNode,
	// ClusterConfig, RevokeNode, …).
	MemberProposesOperatorKinds

	// HandshakeSkipsDenyList: the Raft/RPC port does not check the
	// committed deny-list (RevokeNode) at the handshake or at a
	// connection's later use: a revoked node keeps connecting.
	HandshakeSkipsDenyList
	// The leader core (issue 27, ownership.Leader).

	// LeaderKeepsTerm: a deposed leader (or one that saw an unknown
	// outcome) keeps its term's state and, leading again, plans from it
	// without a Barrier and a new bound (Establish).
	LeaderKeepsTerm

	// The handoff on the old owner's word (issue 28, cluster version 6,
	// ledger.VersionHandoffWords).

	// WordPastLease: the target acts on a word past its validity (the
	// old owner's lease bound as the leader relayed it, counted from the
	// target's ask and scaled by (1−δ)/(1+δ)), until its own lease ends.
	WordPastLease
	// NoWordBurn: a shard revoked toward a target that leaves its owner
	// other than by the Transfer does not burn epoch e+1 (the next Grant
	// gives e+1, a token the target may have used on a word).
	NoWordBurn
	// RetargetAfterWord: the planner grants a shard revoked toward a
	// target away as soon as its owner's ownership is invalid (an expiry,
	// a restart), without waiting out the takeover wait that bounds every
	// word the target may hold.
	RetargetAfterWord
	// WordsSkipConfirm: the leader answers Control.Words without the
	// quorum round after reading the words' bounds: a deposed leader
	// relays a bound past a later leader's takeover grant.
	WordsSkipConfirm
	// ReleaseDuringWord: the FSM accepts a Release of a shard revoked
	// toward a target, which the planner may grant at once while the
	// target acts on the owner's word.
	ReleaseDuringWord
	// TransferPastTarget: the FSM accepts a Transfer of a shard revoked
	// toward T to another node, which gets e+1, the token T may have used.
	TransferPastTarget
	// WordsUnauthenticated: the leader relays a told Transfer and
	// serves words over a connection nothing authenticated.
	WordsUnauthenticated
	// WordFromAnyone: the leader relays a Transfer told to it (Control.
	// OwnerWord) as its From's word whoever the proven sender is.
	WordFromAnyone
	// FinalizeIgnoresGossip: the leader finalizes a newer cluster version
	// counting only the nodes that hold a lease, past a node of the
	// previous release that is still up.
	FinalizeIgnoresGossip
	// FeedSkipsOwners: the ledger's ownership change feed records the
	// shard records an entry wrote but not the shards whose owner's
	// incarnation or liveness it changed (their validity changed too).
	FeedSkipsOwners
	// VoterDropsRaft: a node the Raft configuration lists as a voter drops
	// its Raft instance like a standby-less voter-capable node would, once
	// no leader contacted it for a while.
	VoterDropsRaft
	// ClaimWithoutRequestID: a disk-less member's incarnation claim
	// travels without a request id, so a timed-out attempt that commits
	// after its retry takes the next incarnation.
	ClaimWithoutRequestID
	// WordStaleRecord: the planner takes a Revoking record older than
	// its view of the shard (the last table observed, its revoke track)
	// for a Revoke it has not seen yet and relays the whole takeover wait.
	WordStaleRecord
	// OwnerWordNoApplyWait: the leader judges an old owner's word
	// (Control.OwnerWord) against its replica at once, without waiting for
	// it to apply what was committed when the word arrived.
	OwnerWordNoApplyWait
	// AuthorizeRaftApplied: the leader judges a forwarded command
	// (ControlConfig.Authorize) once Raft's applied index reaches the
	// commit index, not the FSM's own: an entry handed to a lagging FSM
	// counts as applied, and a member's command backed by it is refused.
	AuthorizeRaftApplied
	// AgentFeedSkipsChanges: the agent's input from the change feed
	// (ownership.ObservedSince) carries only the first shard the feed
	// names since the state the agent last observed, not all of them.
	AgentFeedSkipsChanges
	numSwitches
)

var names = [...]string{"none", "skip-expiry-wait", "skip-takeover-wait", "renew-from-ack",
	"resume-after-handoff", "skip-apply-wait", "ignore-establish", "no-drift-margin",
	"accept-stale-epoch", "ignore-drain-deadline",
	"heartbeat-stale-incarnation", "heartbeat-stale-liveness", "expire-ignore-seq",
	"draining-stale-incarnation", "grant-over-valid-owner", "grant-empty-owner",
	"new-owner-unchecked", "revoke-stale-epoch", "revoke-not-owned", "release-stale-epoch",
	"release-not-owner", "release-twice", "transfer-stale-epoch", "transfer-invalid-owner",
	"job-start-not-owner", "job-start-revoking", "job-start-stale-epoch", "job-start-wrong-attempt",
	"job-start-finished", "job-start-running", "job-start-backoff", "finish-stale-epoch",
	"finish-invalid-owner", "finish-wrong-attempt", "finish-finished", "fail-no-dead-letter",
	"enqueue-duplicate-key", "app-stale-epoch", "app-invalid-owner",
	"act-on-revoking", "takeover-without-drain", "drain-ignores-lease",
	"fenced-takeover-unfenced",
	"renew-without-confirm", "renew-without-apply-wait", "establish-ignores-bound", "renew-while-expiring",
	"ack-before-commit", "leave-expired-shards", "no-rebalance", "no-handoff",
	"session-dedup-off", "request-id-ignored", "cluster-version-down", "gated-while-mixed",
	"stream-resume-skips", "member-proposes-operator-kinds", "handshake-skips-deny-list",
	"leader-keeps-term", "word-past-lease", "no-word-burn", "retarget-after-word",
	"words-skip-confirm", "release-during-word", "transfer-past-target", "words-unauthenticated", "word-from-anyone",
	"finalize-ignores-gossip",
	"feed-skips-owners", "voter-drops-raft", "claim-without-request-id", "word-stale-record",
	"owner-word-no-apply-wait", "authorize-raft-applied",
	"agent-feed-skips-changes"}

// rules describes, per switch, the rule it disables (mutations.json).
var rules = [...]string{
	"",
	"protocol: the leader expires a node only Lease·(1+δ) after it last saw its heartbeat",
	"protocol: a Revoking shard is taken over only (Lease+Drain)·(1+δ) after the leader saw the Revoke",
	"protocol: a lease counts from the heartbeat's ask time, not its ack",
	"protocol rule 5: after proposing its handoff a node never acts on that epoch again",
	"protocol rule 2: a heartbeat ack extends the lease only once the replica applied its index",
	"protocol: a new leader waits out leases and drains it could not see (establishedAt)",
	"protocol: the node counts Lease·(1−δ), the leader waits Lease·(1+δ)",
	"ledger Grant: accepted only at ExpectedEpoch == the shard's epoch (ErrStaleEpoch)",
	"protocol rule 4: a node acts on a Revoking shard only until its drain deadline",
	"ledger Heartbeat: a lower incarnation is refused (ErrStaleIncarnation)",
	"ledger Heartbeat: another liveness epoch is refused (ErrStaleLiveness)",
	"ledger ExpireNode: a CAS on (incarnation, liveness, seq) (ErrConflict)",
	"ledger SetDraining: only from the current incarnation (ErrStaleIncarnation)",
	"ledger Grant: refused while the ownership is valid, unless a Takeover of a Revoking shard (ErrShardOwned)",
	"ledger Grant: an empty owner is invalid (ErrInvalid)",
	"ledger Grant/Transfer: the grantee's record matches (incarnation, liveness)",
	"ledger Revoke: only at the shard's epoch (ErrStaleEpoch)",
	"ledger Revoke: only of an Owned shard (ErrConflict)",
	"ledger Release: only at the shard's epoch (ErrStaleEpoch)",
	"ledger Release: only by the owner (ErrNotOwner)",
	"ledger Release: not of an Unowned shard (ErrConflict)",
	"ledger Transfer: only at the shard's epoch (ErrStaleEpoch)",
	"ledger Transfer: only from the valid owner (ErrNotOwner)",
	"ledger JobStart: only by the valid owner (ErrNotOwner)",
	"ledger JobStart: not on a Revoking shard (ErrNotOwner)",
	"ledger JobStart: only at the shard's epoch (ErrStaleEpoch)",
	"ledger JobStart: Attempt is the job's current attempt (ErrWrongAttempt)",
	"ledger JobStart: not of a finished job (ErrJobFinished)",
	"ledger JobStart: a running attempt is superseded only when fenced out or timed out (ErrJobState)",
	"ledger JobStart: not before the job's NotBefore (ErrJobState)",
	"ledger JobComplete/JobFail: only at the shard's and the attempt's epoch (ErrStaleEpoch)",
	"ledger JobComplete/JobFail: only while the ownership is valid (ErrNotOwner)",
	"ledger JobComplete/JobFail: only for the current attempt (ErrWrongAttempt)",
	"ledger JobComplete/JobFail: a finished job is never finished again (ErrJobFinished)",
	"ledger JobFail: the last allowed attempt's failure dead-letters the job",
	"ledger JobEnqueue: a retained (shard, Key) returns the existing job (Duplicate)",
	"ledger App: only at the shard's epoch (ErrStaleEpoch)",
	"ledger App: only while the ownership is valid (ErrNotOwner)",
	"protocol rule 4: a node never starts acting on a Revoking shard (it drains only what it was acting on)",
	"protocol: a takeover waits out the owner's drain window too: (Lease+Drain)·(1+δ), not Lease·(1+δ)",
	"protocol rule 4: a draining owner stops at its lease end even inside the drain window",
	"ledger Grant: a Takeover over a valid Owned owner only for a shard under the fenced-takeover policy (ErrShardOwned)",
	"protocol (v4): the leader acks a renewal only after a quorum confirmed its leadership after receipt",
	"protocol rule 2 (v4): a renewal ack extends the lease only once the replica applied its commit index",
	"protocol (v4): a new leader counts every node as seen at the bound from the voters' confirm records, no earlier",
	"protocol (v4): no renewal is accepted between the decision to expire a node and seeing the expiry apply",
	"S3: the control group acknowledges a command only once it is durable on a majority of the voters",
	"L1: the planner grants every shard whose ownership is not valid (Unowned, expired or restarted owner)",
	"L2: the planner revokes shards from nodes above their quota so that every eligible node reaches its quota",
	"L3: a draining owner hands its shard over (Release/Transfer) as soon as it stopped acting, not after the takeover wait",
	"ledger Session: a request id in the session table is answered with its first result, never applied again",
	"ledger Session: a request id is bound to its command's kind and shard; another command under it is refused (ErrInvalid)",
	"ledger ClusterConfig: the cluster version never goes down (ErrInvalid)",
	"ledger: a command gated at a cluster version is refused while the cluster runs an older one (ErrVersion)",
	"stream (v5): a member resumes from its own applied index, and applies only the entry that follows it (never a gap)",
	"security: ledger.Authorize refuses operator actions from a member certificate (ErrUnauthorized)",
	"security (v5): every handshake and every later use of an authenticated connection checks the committed deny-list (RevokeNode)",
	"protocol: every leadership term is established anew (Barrier, bound, Establish) before the leader plans; nothing of an earlier term is kept",
	"handoff word rule 1 (v6): the target acts on the old owner's word only until the relayed bound, counted from its ask, scaled by (1−δ)/(1+δ)",
	"handoff word rule 2 (v6): a shard revoked toward a target that leaves its owner other than by the Transfer burns e+1 (the next Grant gives e+2)",
	"handoff word rule 3 (v6): a shard revoked toward a target is granted elsewhere only after the takeover wait, even when its owner's ownership is invalid",
	"handoff word rule 1 (v6): the leader confirms its leadership by a quorum round after it read the words' bounds, before it answers",
	"ledger Release (v6): refused for a shard revoked toward a target (ErrConflict): only the Transfer or the takeover grant moves it",
	"ledger Transfer (v6): a shard revoked toward T goes only to T (ErrConflict)",
	"security (v6): words are relayed and served only over connections whose peer TLS proved",
	"security (v6): the leader relays a told Transfer only as the word of the node TLS proved is its From",
	"upgrade: the leader finalizes a newer cluster version only when every node holding a lease or up in gossip at its registered incarnation speaks it",
	"ledger change feed: every shard whose record or owner validity an entry changed is in the feed (node/ re-checks only those)",
	"control group: a node the Raft configuration lists as a voter never drops its Raft; only voter-capable non-standbys out of the configuration do",
	"disk-less claim: every attempt of one claim carries the same request id, so a late attempt answers the first one's incarnation",
	"handoff word rule 1 (v6): the leader relays a bound only for a Revoking record at least as new as its planner's view of the shard (the last table observed, the revoke track)",
	"handoff word (v6): the leader judges a told word only once its FSM applied what was committed when the word arrived (a replica not caught up within RPCTimeout refuses it unjudged), so a lagging replica does not drop a real word",
	"control group: the leader authorizes a forwarded command only once its FSM (not just Raft) applied what was committed when it arrived (a replica not caught up within the request's timeout refuses it unjudged, ErrTimeout), so a lagging replica does not refuse a member's legitimate command",
	"agent input: every shard record the change feed names since the state the agent last observed reaches it (every record when the feed cannot tell)",
}

// EnvSwitch names the switch a test process built with -tags mutations
// starts with (make mutations runs the tests that catch the switches the
// simulator cannot, each under its switch: simulation's testCaught).
// Without the tag it is ignored.
const EnvSwitch = "TENURE_MUTATION"

// Rule describes the rule switch s disables.
func (s Switch) Rule() string {
	if s <= 0 || s >= numSwitches {
		return ""
	}
	return rules[s]
}

// String names the switch.
func (s Switch) String() string {
	if s < 0 || s >= numSwitches {
		return "unknown"
	}
	return names[s]
}

// All lists every switch except None.
func All() []Switch {
	out := make([]Switch, 0, numSwitches-1)
	for s := None + 1; s < numSwitches; s++ {
		out = append(out, s)
	}
	return out
}

// SkipReason is what a test that needs the switches says when it skips
// because Enabled is false.
const SkipReason = "mutation switches are compiled in only with -tags mutations (make test and make mutations pass it)"

// ByName returns the switch named name.
func ByName(name string) (Switch, bool) {
	for s := None; s < numSwitches; s++ {
		if names[s] == name {
			return s, true
		}
	}
	return None, false
}
