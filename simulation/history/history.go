// Package history is the simulator's ledger-contract checker: fed every
// committed command with its result, in log order, it keeps its own model
// of the committed records (built only from what the commands and results
// say, never from the FSM's state) and reports every accepted command the
// contract of docs/ledger.md and docs/protocol.md forbids:
//
//   - S1: one owner per (shard, epoch); a shard's epoch changes only by +1,
//     only on Grant/Transfer;
//   - S2: every fenced command (JobStart, JobComplete, JobFail, App,
//     Revoke, Release, Transfer) accepted only at the shard's current epoch
//     and, where it has one, from the owner at that epoch whose ownership
//     is valid;
//   - jobs: transitions only along the documented state machine (Pending →
//     Started → Completed/Dead or back to Pending), at most one job per
//     idempotency key while it is retained, at most one running attempt;
//   - liveness: the node-record compare-and-sets (Heartbeat, ExpireNode,
//     SetDraining);
//   - sessions: a request id (Session) is applied at most once while the
//     ledger remembers it — a retry is answered with the first result —
//     and an id used for another command is refused (ErrInvalid; from
//     version 5 ErrRequestIDReused);
//   - upgrade: the cluster version never goes down, and no command gated
//     at a cluster version is accepted while the cluster runs an older one;
//   - contract: a probe (a command the caller knows the contract rejects)
//     rejected with the documented sentinel.
//
// S3 (acknowledged commands in the log) needs the log itself; the tier-1
// simulator checks it with the acknowledgements it records. Tier 1 feeds the
// checker from its reference replica, tier 2 from the first replica to
// apply each entry.
package history

import (
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/ledger"
)

type jobKey struct {
	shard uint32
	key   string
}

// Checker is the model. Not safe for concurrent use.
type Checker struct {
	violate  func(rule, msg string)
	settings ledger.LedgerSettings

	nodes    map[string]ledger.NodeRecord
	shards   map[uint32]ledger.ShardRecord
	jobs     map[uint64]ledger.JobRecord
	keys     map[jobKey]uint64
	owners   map[uint32]map[uint64]string
	maxJob   uint64
	finished int // jobs finished so far (an upper bound of those retained)
	// policies are the accepted SetTakeoverPolicy commands in log order:
	// a shard is fenced when the last one covering it says so.
	policies []ledger.SetTakeoverPolicy
	// version is the cluster version the accepted ClusterConfigs raised
	// (0: none yet); forgotten is the highest incarnation of every id whose
	// record an accepted ForgetNode removed.
	version   uint32
	forgotten map[string]uint64
	// sessions are the request ids applied so far (Session), in the
	// order sessionSeq counts.
	sessions   map[ledger.RequestID]sessionRec
	sessionSeq uint64
	// sessionNow is the latest proposer clock of any Session so far: the
	// ledger forgets an id by age only once a Session's clock is a window
	// past the id's.
	sessionNow int64
}

// sessionRec is what the model remembers of a request id.
type sessionRec struct {
	index uint64
	kind  ledger.Kind
	shard uint32
	now   int64
	seq   uint64
	job   uint64
}

// Fenced reports whether the accepted SetTakeoverPolicy commands so far
// put shard under fenced takeover (S4 waived for it; S2 still checked).
func (c *Checker) Fenced(shard uint32) bool { return c.fencedTakeover(shard) }

// fencedTakeover reports whether the accepted policies put shard under
// fenced takeover (ledger.SetTakeoverPolicy): the last one covering it
// decides.
func (c *Checker) fencedTakeover(shard uint32) bool {
	for i := len(c.policies) - 1; i >= 0; i-- {
		if p := c.policies[i]; p.First <= shard && shard <= p.Last {
			return p.Fenced
		}
	}
	return false
}

// New returns a checker for a ledger that starts empty with settings;
// violate receives every violation (rule: S1, S2, jobs, liveness,
// contract).
func New(settings ledger.LedgerSettings, violate func(rule, msg string)) *Checker {
	return &Checker{violate: violate, settings: settings, nodes: map[string]ledger.NodeRecord{},
		shards: map[uint32]ledger.ShardRecord{}, jobs: map[uint64]ledger.JobRecord{}, keys: map[jobKey]uint64{},
		owners: map[uint32]map[uint64]string{}, sessions: map[ledger.RequestID]sessionRec{}}
}

func (c *Checker) fail(rule string, index uint64, cmd ledger.Command, format string, args ...any) {
	c.violate(rule, fmt.Sprintf("#%d %s: ", index, Describe(cmd))+fmt.Sprintf(format, args...))
}

// Describe renders a command for violation messages.
func Describe(cmd ledger.Command) string {
	switch c := cmd.(type) {
	case ledger.App:
		return fmt.Sprintf("App{shard %d, epoch %d, %s}", c.Shard, c.Epoch, c.Type)
	case ledger.JobEnqueue:
		return fmt.Sprintf("JobEnqueue{shard %d, key %q, max %d}", c.Shard, c.Key, c.MaxAttempts)
	case ledger.JobComplete:
		return fmt.Sprintf("JobComplete{shard %d, epoch %d, job %d, attempt %d}", c.Shard, c.Epoch, c.Job, c.Attempt)
	}
	return fmt.Sprintf("%T%+v", cmd, cmd)
}

// valid is the ownership rule of docs/protocol.md, on the model's records.
func (c *Checker) valid(r ledger.ShardRecord) bool {
	if r.State != ledger.ShardOwned && r.State != ledger.ShardRevoking {
		return false
	}
	n, ok := c.nodes[r.Owner]
	return ok && n.Incarnation == r.OwnerIncarnation && n.Liveness == r.OwnerLiveness
}

func (c *Checker) shard(id uint32) ledger.ShardRecord {
	r, ok := c.shards[id]
	if !ok {
		r = ledger.ShardRecord{Shard: id}
	}
	return r
}

// Probe checks a command the caller built to break exactly one rule of the
// contract in the state the checker holds: it must be rejected with want
// (nil: accepted, for probes that must be answered without an error such as
// a duplicate enqueue). Then the command goes through Apply like any other.
func (c *Checker) Probe(index uint64, from string, cmd ledger.Command, res ledger.Result, want error) {
	switch {
	case want == nil && res.Err != nil:
		c.fail("contract", index, cmd, "rejected (%v), want accepted", res.Err)
	case want != nil && res.Err == nil:
		c.fail("contract", index, cmd, "accepted, want %v", want)
	case want != nil && !errors.Is(res.Err, want):
		c.fail("contract", index, cmd, "rejected with %v, want %v", res.Err, want)
	}
	c.Apply(index, from, cmd, res)
}

// Apply checks one committed command and its result and updates the model.
// from is the proposing node when known ("" otherwise): an owner's command
// accepted from another node is a violation.
func (c *Checker) Apply(index uint64, from string, cmd ledger.Command, res ledger.Result) {
	if b, ok := cmd.(ledger.Batch); ok {
		for i, sc := range b.Commands {
			if i < len(res.Results) {
				c.Apply(index, from, sc, res.Results[i])
			}
		}
		return
	}
	if g := gate(cmd); g > max(c.version, 1) && res.Err == nil {
		c.fail("upgrade", index, cmd, "accepted at cluster version %d; it needs version %d", max(c.version, 1), g)
	}
	switch cmd := cmd.(type) {
	case ledger.Session:
		c.session(index, from, cmd, res)
	case ledger.Heartbeat:
		c.heartbeat(index, cmd, res)
	case ledger.ClaimIncarnation:
		c.claim(index, cmd, res)
	case ledger.ClusterConfig:
		if res.Err == nil && cmd.Version < c.version {
			c.fail("upgrade", index, cmd, "accepted: the cluster version went down from %d to %d", c.version, cmd.Version)
		}
		if res.Err == nil {
			c.version = max(c.version, cmd.Version)
		}
	case ledger.ForgetNode:
		c.forget(index, cmd, res)
	case ledger.SetTakeoverPolicy:
		if res.Err == nil && !res.Duplicate {
			c.policies = append(c.policies, cmd)
		}
	case ledger.ExpireNode:
		if res.Err != nil {
			return
		}
		pre, ok := c.nodes[cmd.Node]
		if !ok || pre.Incarnation != cmd.Incarnation || pre.Liveness != cmd.Liveness || pre.Seq != cmd.Seq {
			c.fail("liveness", index, cmd, "accepted against record %+v (known %v)", pre, ok)
		}
		if res.Node.Liveness != pre.Liveness+1 {
			c.fail("liveness", index, cmd, "liveness %d -> %d, want +1", pre.Liveness, res.Node.Liveness)
		}
		c.nodes[cmd.Node] = res.Node
	case ledger.SetDraining:
		if res.Err != nil {
			return
		}
		if pre, ok := c.nodes[cmd.Node]; !ok || pre.Incarnation != cmd.Incarnation {
			c.fail("liveness", index, cmd, "accepted against record %+v (known %v)", pre, ok)
		}
		c.nodes[cmd.Node] = res.Node
	case ledger.Grant:
		if res.Err != nil {
			return
		}
		pre := c.shard(cmd.Shard)
		if pre.Epoch != cmd.ExpectedEpoch {
			c.fail("S1", index, cmd, "accepted at epoch %d", pre.Epoch)
		}
		if cmd.Owner == "" {
			c.fail("S1", index, cmd, "granted to the empty node id")
		}
		// A takeover replaces a valid owner only once it was revoked, or —
		// fenced takeover — at once for a shard under the fenced policy.
		if c.valid(pre) && !(cmd.Takeover && pre.State == ledger.ShardRevoking) && !(cmd.Takeover && c.fencedTakeover(cmd.Shard)) {
			c.fail("S1", index, cmd, "granted over %s's valid ownership (%s, epoch %d)", pre.Owner, pre.State, pre.Epoch)
		}
		c.checkGrantee(index, cmd, cmd.Owner, cmd.OwnerIncarnation, cmd.OwnerLiveness)
		c.newOwner(index, cmd, c.burned(pre), res.Shard, cmd.Owner)
	case ledger.Revoke:
		if res.Err != nil {
			return
		}
		pre := c.shard(cmd.Shard)
		if pre.Epoch != cmd.Epoch {
			c.fail("S2", index, cmd, "accepted at epoch %d", pre.Epoch)
		}
		if pre.State != ledger.ShardOwned {
			c.fail("S1", index, cmd, "revoked a shard in state %s", pre.State)
		}
		c.sameEpoch(index, cmd, pre, res.Shard, ledger.ShardRevoking)
	case ledger.Release:
		if res.Err != nil {
			return
		}
		pre := c.shard(cmd.Shard)
		if pre.Epoch != cmd.Epoch {
			c.fail("S2", index, cmd, "accepted at epoch %d", pre.Epoch)
		}
		if pre.Owner != cmd.Owner || (from != "" && from != cmd.Owner) {
			c.fail("S2", index, cmd, "released by %s (proposed by %q), owner %s", cmd.Owner, from, pre.Owner)
		}
		if pre.State == ledger.ShardUnowned {
			c.fail("S1", index, cmd, "released a shard already Unowned at epoch %d", pre.Epoch)
		}
		c.sameEpoch(index, cmd, c.burned(pre), res.Shard, ledger.ShardUnowned)
	case ledger.Transfer:
		if res.Err != nil {
			return
		}
		pre := c.shard(cmd.Shard)
		if pre.Epoch != cmd.Epoch {
			c.fail("S2", index, cmd, "accepted at epoch %d", pre.Epoch)
		}
		if pre.Owner != cmd.From || !c.valid(pre) || (from != "" && from != cmd.From) {
			c.fail("S2", index, cmd, "transfer from %s (proposed by %q), shard %s by %s valid %v", cmd.From, from, pre.State, pre.Owner, c.valid(pre))
		}
		if cmd.To == "" {
			c.fail("S1", index, cmd, "transferred to the empty node id")
		}
		c.checkGrantee(index, cmd, cmd.To, cmd.ToIncarnation, cmd.ToLiveness)
		c.newOwner(index, cmd, pre, res.Shard, cmd.To)
	case ledger.JobEnqueue:
		c.enqueue(index, cmd, res)
	case ledger.JobStart:
		c.start(index, from, cmd, res)
	case ledger.JobComplete:
		c.finish(index, from, cmd, cmd.Shard, cmd.Epoch, cmd.Job, cmd.Attempt, res, func(pre ledger.JobRecord) ledger.JobState {
			return ledger.JobCompleted
		})
	case ledger.JobFail:
		c.finish(index, from, cmd, cmd.Shard, cmd.Epoch, cmd.Job, cmd.Attempt, res, func(pre ledger.JobRecord) ledger.JobState {
			if pre.Attempt >= pre.MaxAttempts {
				return ledger.JobDead
			}
			return ledger.JobPending
		})
	case ledger.App:
		if res.Err != nil {
			return
		}
		c.fenced(index, from, cmd, cmd.Shard, cmd.Epoch, false)
	case ledger.Settings:
		if res.Err != nil {
			return
		}
		if cmd.JobRetention != 0 {
			c.settings.JobRetention = cmd.JobRetention
		}
		if cmd.MaxFinishedJobs != 0 {
			c.settings.MaxFinishedJobs = cmd.MaxFinishedJobs
		}
		if cmd.DefaultMaxAttempts != 0 {
			c.settings.DefaultMaxAttempts = cmd.DefaultMaxAttempts
		}
	case ledger.LogSettings:
		if res.Err != nil {
			return
		}
		c.settings.JobRetention, c.settings.MaxFinishedJobs, c.settings.DefaultMaxAttempts = cmd.JobRetention, cmd.MaxFinishedJobs, cmd.DefaultMaxAttempts
		c.settings.SessionWindow, c.settings.MaxSessions = cmd.SessionWindow, cmd.MaxSessions
	}
}

func (c *Checker) heartbeat(index uint64, cmd ledger.Heartbeat, res ledger.Result) {
	if res.Err != nil {
		return
	}
	pre, known := c.nodes[cmd.Node]
	post := res.Node
	switch {
	case !known:
		if post.Liveness != 1 || post.Incarnation != cmd.Incarnation {
			c.fail("liveness", index, cmd, "first record %+v", post)
		}
	case cmd.Incarnation > pre.Incarnation:
		if post.Liveness != pre.Liveness+1 || post.Incarnation != cmd.Incarnation {
			c.fail("liveness", index, cmd, "restart from %+v to %+v: want liveness +1", pre, post)
		}
	case cmd.Incarnation < pre.Incarnation:
		c.fail("liveness", index, cmd, "accepted from incarnation %d, record at %d", cmd.Incarnation, pre.Incarnation)
	case cmd.Liveness != pre.Liveness && cmd.Liveness != 0:
		c.fail("liveness", index, cmd, "accepted at liveness %d, record at %d", cmd.Liveness, pre.Liveness)
	default:
		if post.Liveness != pre.Liveness || post.Seq != pre.Seq+1 {
			c.fail("liveness", index, cmd, "renewal from %+v to %+v", pre, post)
		}
	}
	c.nodes[cmd.Node] = post
}

// claim checks an incarnation claim: it registers the node one
// incarnation above the record the model holds, with the liveness epoch
// moved on (a new record starts at liveness 1), so no two processes of an
// id share an incarnation and every grant of the earlier one dies. An id
// with no record starts at incarnation 1 — from ledger.VersionForgetNodes
// on at the claim's log index, which is above every incarnation a
// forgotten record of that id held.
func (c *Checker) claim(index uint64, cmd ledger.ClaimIncarnation, res ledger.Result) {
	if res.Err != nil {
		return
	}
	pre, known := c.nodes[cmd.Node]
	post := res.Node
	wantInc, wantLiveness := pre.Incarnation+1, uint64(1)
	switch {
	case known:
		wantLiveness = pre.Liveness + 1
	case c.version >= ledger.VersionForgetNodes:
		wantInc = max(index, 1)
	}
	if post.ID != cmd.Node || post.Incarnation != wantInc || post.Liveness != wantLiveness {
		c.fail("liveness", index, cmd, "claim from %+v (known %v) gave %+v: want incarnation %d at liveness %d",
			pre, known, post, wantInc, wantLiveness)
	}
	if old := c.forgotten[cmd.Node]; !known && post.Incarnation <= old {
		c.fail("liveness", index, cmd, "claim gave incarnation %d to %s, whose forgotten record held %d", post.Incarnation, cmd.Node, old)
	}
	c.nodes[cmd.Node] = post
}

// forget checks a ForgetNode: accepted only for the record the model
// holds (incarnation, liveness, seq) and only while no shard names the
// node; the record is then gone.
func (c *Checker) forget(index uint64, cmd ledger.ForgetNode, res ledger.Result) {
	if res.Err != nil {
		return
	}
	pre, known := c.nodes[cmd.Node]
	if !known || pre.Incarnation != cmd.Incarnation || pre.Liveness != cmd.Liveness || pre.Seq != cmd.Seq {
		c.fail("liveness", index, cmd, "forget accepted against %+v (known %v)", pre, known)
	}
	for _, rec := range c.shards {
		if (rec.State != ledger.ShardUnowned && rec.Owner == cmd.Node) || rec.Target == cmd.Node {
			c.fail("liveness", index, cmd, "forget accepted while shard %d names %s", rec.Shard, cmd.Node)
		}
	}
	if c.forgotten == nil {
		c.forgotten = make(map[string]uint64)
	}
	c.forgotten[cmd.Node] = max(c.forgotten[cmd.Node], pre.Incarnation)
	delete(c.nodes, cmd.Node)
}

// burned is pre as a Grant or a Release must see it from cluster version
// 6 (ledger.VersionHandoffWords) on: a shard revoked toward a target may
// have been acted on at epoch+1 on the old owner's word, so leaving its
// owner other than by the Transfer burns that epoch (pre's epoch +1: the
// Grant gives +2, the Release leaves +1).
func (c *Checker) burned(pre ledger.ShardRecord) ledger.ShardRecord {
	if c.version >= ledger.VersionHandoffWords && pre.State == ledger.ShardRevoking && pre.Target != "" {
		pre.Epoch++
	}
	return pre
}

// checkGrantee: the new owner's record matches (inc, liveness).
func (c *Checker) checkGrantee(index uint64, cmd ledger.Command, node string, inc, liveness uint64) {
	n, ok := c.nodes[node]
	if !ok || n.Incarnation != inc || n.Liveness != liveness {
		c.fail("S1", index, cmd, "granted to %s at (inc %d, liveness %d), record %+v (known %v)", node, inc, liveness, n, ok)
	}
}

// newOwner checks and records an ownership change (Grant, Transfer).
func (c *Checker) newOwner(index uint64, cmd ledger.Command, pre, post ledger.ShardRecord, owner string) {
	if post.Epoch != pre.Epoch+1 || post.Owner != owner || post.State != ledger.ShardOwned {
		c.fail("S1", index, cmd, "shard %d went from epoch %d to %d (%s by %s), want epoch +1 Owned by %s",
			pre.Shard, pre.Epoch, post.Epoch, post.State, post.Owner, owner)
	}
	m := c.owners[post.Shard]
	if m == nil {
		m = map[uint64]string{}
		c.owners[post.Shard] = m
	}
	if o, ok := m[post.Epoch]; ok && o != post.Owner {
		c.fail("S1", index, cmd, "shard %d epoch %d owned by %s and %s", post.Shard, post.Epoch, o, post.Owner)
	}
	m[post.Epoch] = post.Owner
	c.shards[post.Shard] = post
}

// sameEpoch checks and records a state change that keeps the epoch and
// owner (Revoke, Release).
func (c *Checker) sameEpoch(index uint64, cmd ledger.Command, pre, post ledger.ShardRecord, state ledger.ShardState) {
	if post.Epoch != pre.Epoch || post.Owner != pre.Owner || post.State != state {
		c.fail("S1", index, cmd, "shard %d went from %s by %s at epoch %d to %s by %s at %d", pre.Shard,
			pre.State, pre.Owner, pre.Epoch, post.State, post.Owner, post.Epoch)
	}
	c.shards[post.Shard] = post
}

// fenced checks an accepted owner's command: current epoch, valid
// ownership, proposed by the owner; owned additionally demands Owned (not
// Revoking). It returns the shard record.
func (c *Checker) fenced(index uint64, from string, cmd ledger.Command, shard uint32, epoch uint64, owned bool) ledger.ShardRecord {
	pre := c.shard(shard)
	switch {
	case pre.Epoch != epoch:
		c.fail("S2", index, cmd, "accepted at stale epoch %d (shard %d at epoch %d)", epoch, shard, pre.Epoch)
	case !c.valid(pre):
		c.fail("S2", index, cmd, "accepted while shard %d (%s by %s, epoch %d) has no valid owner", shard, pre.State, pre.Owner, pre.Epoch)
	case from != "" && from != pre.Owner:
		c.fail("S2", index, cmd, "accepted from %s, shard %d's owner at epoch %d is %s", from, shard, epoch, pre.Owner)
	case owned && pre.State != ledger.ShardOwned:
		c.fail("S2", index, cmd, "accepted while shard %d is %s", shard, pre.State)
	}
	return pre
}

// retained reports whether the finished job j is certainly still kept by
// the ledger at now (pruning drops the oldest beyond the settings).
func (c *Checker) retained(j ledger.JobRecord, now int64) bool {
	if !j.State.Finished() {
		return true
	}
	return c.finished <= int(c.settings.MaxFinishedJobs) && now-j.FinishedAt < c.settings.JobRetention
}

func (c *Checker) enqueue(index uint64, cmd ledger.JobEnqueue, res ledger.Result) {
	if res.Err != nil {
		return
	}
	k := jobKey{cmd.Shard, cmd.Key}
	if res.Duplicate {
		if id, ok := c.keys[k]; cmd.Key == "" || (ok && id != res.Job.ID) || res.Job.Key != cmd.Key {
			c.fail("jobs", index, cmd, "duplicate of job %d (key %q), the key's job is %d", res.Job.ID, res.Job.Key, id)
		}
		return
	}
	j := res.Job
	if j.ID <= c.maxJob || j.State != ledger.JobPending || j.Attempt != 0 || j.Shard != cmd.Shard || j.Key != cmd.Key {
		c.fail("jobs", index, cmd, "created %+v (last id %d)", j, c.maxJob)
	}
	if cmd.Key != "" {
		if id, ok := c.keys[k]; ok {
			if old := c.jobs[id]; c.retained(old, cmd.Now) {
				c.fail("jobs", index, cmd, "a second job %d for key %q while job %d (%s) is retained", j.ID, cmd.Key, id, old.State)
			}
		}
		c.keys[k] = j.ID
	}
	c.maxJob = max(c.maxJob, j.ID)
	c.jobs[j.ID] = j
}

// abandoned: a started attempt may be superseded (fenced out, or timed out).
func abandoned(j ledger.JobRecord, epoch uint64, now int64) bool {
	return j.Epoch < epoch || (j.Timeout > 0 && now > j.StartedAt && uint64(now)-uint64(j.StartedAt) > uint64(j.Timeout))
}

func (c *Checker) start(index uint64, from string, cmd ledger.JobStart, res ledger.Result) {
	pre, known := c.jobs[cmd.Job]
	if res.Err != nil {
		// The one rejection that changes the job: an abandoned attempt that
		// used the last one is dead-lettered.
		if known && !pre.State.Finished() && res.Job.ID == cmd.Job && res.Job.State == ledger.JobDead {
			sh := c.shard(cmd.Shard)
			if pre.State != ledger.JobStarted || !abandoned(pre, sh.Epoch, cmd.Now) || pre.Attempt < pre.MaxAttempts {
				c.fail("jobs", index, cmd, "dead-lettered job %+v", pre)
			}
			c.finishJob(res.Job)
		}
		return
	}
	sh := c.fenced(index, from, cmd, cmd.Shard, cmd.Epoch, true)
	if sh.Owner != cmd.Owner {
		c.fail("S2", index, cmd, "started by %s, shard %d's owner at epoch %d is %s", cmd.Owner, cmd.Shard, sh.Epoch, sh.Owner)
	}
	switch {
	case !known || pre.Shard != cmd.Shard:
		c.fail("jobs", index, cmd, "started an unknown job (known %v, on shard %d)", known, pre.Shard)
	case pre.State.Finished():
		c.fail("jobs", index, cmd, "started a %s job", pre.State)
	case cmd.Attempt != pre.Attempt:
		c.fail("jobs", index, cmd, "started after attempt %d, the job is at %d", cmd.Attempt, pre.Attempt)
	case pre.State == ledger.JobPending && cmd.Now < pre.NotBefore:
		c.fail("jobs", index, cmd, "started at %d, backing off until %d", cmd.Now, pre.NotBefore)
	case pre.State == ledger.JobStarted && !abandoned(pre, sh.Epoch, cmd.Now):
		c.fail("jobs", index, cmd, "a second attempt while attempt %d (epoch %d, started %d, timeout %d) runs", pre.Attempt, pre.Epoch, pre.StartedAt, pre.Timeout)
	}
	post := res.Job
	if post.State != ledger.JobStarted || post.Attempt != pre.Attempt+1 || post.Owner != cmd.Owner || post.Epoch != cmd.Epoch {
		c.fail("jobs", index, cmd, "start made %+v from %+v", post, pre)
	}
	c.jobs[cmd.Job] = post
}

func (c *Checker) finish(index uint64, from string, cmd ledger.Command, shard uint32, epoch, id uint64, attempt uint32,
	res ledger.Result, next func(ledger.JobRecord) ledger.JobState) {
	pre, known := c.jobs[id]
	if res.Err != nil {
		// A retried finish must say the job finished (ErrJobFinished), unless
		// the job was pruned or the command itself is malformed.
		if known && pre.Shard == shard && pre.State.Finished() && !errors.Is(res.Err, ledger.ErrJobFinished) &&
			!errors.Is(res.Err, ledger.ErrUnknownJob) && !errors.Is(res.Err, ledger.ErrTooLarge) && !errors.Is(res.Err, ledger.ErrInvalid) {
			c.fail("contract", index, cmd, "finish of %s job %d rejected with %v, want %v", pre.State, id, res.Err, ledger.ErrJobFinished)
		}
		return
	}
	c.fenced(index, from, cmd, shard, epoch, false)
	switch {
	case !known || pre.Shard != shard:
		c.fail("jobs", index, cmd, "finished an unknown job (known %v, on shard %d)", known, pre.Shard)
	case pre.State != ledger.JobStarted:
		c.fail("jobs", index, cmd, "finished a %s job", pre.State)
	case pre.Attempt != attempt:
		c.fail("jobs", index, cmd, "finished attempt %d, the job is at %d", attempt, pre.Attempt)
	case pre.Epoch != epoch:
		c.fail("S2", index, cmd, "finished attempt %d at epoch %d, it started at %d", attempt, epoch, pre.Epoch)
	}
	post := res.Job
	if want := next(pre); post.State != want || post.Attempt != pre.Attempt {
		c.fail("jobs", index, cmd, "made %s attempt %d from %s attempt %d of %d, want %s", post.State, post.Attempt,
			pre.State, pre.Attempt, pre.MaxAttempts, want)
	}
	c.finishJob(post)
}

func (c *Checker) finishJob(j ledger.JobRecord) {
	if j.State.Finished() && !c.jobs[j.ID].State.Finished() {
		c.finished++
	}
	c.jobs[j.ID] = j
}

// Shard returns the model's record of shard id (probes are built from it).
func (c *Checker) Shard(id uint32) ledger.ShardRecord { return c.shard(id) }

// Valid reports whether the model holds r's ownership valid.
func (c *Checker) Valid(r ledger.ShardRecord) bool { return c.valid(r) }

// gate is the cluster version a command needs (docs/upgrades.md); 0 for
// the commands of version 1 and those the ledger does not gate itself.
func gate(cmd ledger.Command) uint32 {
	switch cmd.(type) {
	case ledger.ClaimIncarnation:
		return ledger.VersionDisklessMembers
	case ledger.LogSettings:
		return ledger.VersionLogSettings
	case ledger.SetTakeoverPolicy:
		return ledger.VersionFencedTakeover
	case ledger.ForgetNode:
		return ledger.VersionForgetNodes
	}
	return 0
}

// session checks a Session: while the ledger must still remember its
// request id (well inside SessionWindow and MaxSessions), a second use is
// answered from the table (Replayed, the first result's job) for the same
// command, refused (ErrInvalid) for another; a first use applies its
// command, which is checked like any other.
func (c *Checker) session(index uint64, from string, cmd ledger.Session, res ledger.Result) {
	inner := cmd.Command
	switch inner.(type) {
	case nil, ledger.Batch, ledger.Session:
		return
	}
	if cmd.ID.IsZero() {
		return
	}
	kind, shard, now := ledger.KindOf(inner), sessionShard(inner), sessionNow(inner)
	c.sessionNow = max(c.sessionNow, now)
	if prev, ok := c.sessions[cmd.ID]; ok && c.remembered(prev, now) {
		switch {
		case prev.kind != kind || prev.shard != shard:
			if want := c.reusedIDErr(); !errors.Is(res.Err, want) {
				c.fail("sessions", index, cmd, "request id %s of a %s on shard %d (#%d) reused for a %s on shard %d: answered (replayed %v, %v), want %v",
					cmd.ID, prev.kind, prev.shard, prev.index, kind, shard, res.Replayed, res.Err, want)
			}
		case !res.Replayed:
			c.fail("sessions", index, cmd, "request id %s applied again (first at #%d): want the first result replayed", cmd.ID, prev.index)
			c.Apply(index, from, inner, res)
		case prev.job != 0 && res.Job.ID != prev.job:
			c.fail("sessions", index, cmd, "request id %s replayed job %d, the first result was job %d", cmd.ID, res.Job.ID, prev.job)
		}
		return
	}
	if res.Replayed {
		if _, ok := c.sessions[cmd.ID]; !ok {
			c.fail("sessions", index, cmd, "replayed request id %s, which was never applied", cmd.ID)
		}
		return
	}
	c.Apply(index, from, inner, res)
	c.sessionSeq++
	c.sessions[cmd.ID] = sessionRec{index: index, kind: kind, shard: shard, now: now, seq: c.sessionSeq, job: res.Job.ID}
}

// reusedIDErr is how the ledger refuses a request id reused for another
// command: ErrRequestIDReused from ledger.VersionJobsAPI on (the id is
// bound to its request's body), ErrInvalid before.
func (c *Checker) reusedIDErr() error {
	return ReusedIDErr(c.version)
}

// ReusedIDErr is reusedIDErr for a cluster running version v.
func ReusedIDErr(v uint32) error {
	if v >= ledger.VersionJobsAPI {
		return ledger.ErrRequestIDReused
	}
	return ledger.ErrInvalid
}

// remembered reports whether the ledger must still hold prev: no Session
// so far (this one included) carried a proposer clock a window past
// prev's (the ledger evicts by age with the clocks of the Sessions it
// applies), and fewer than half of MaxSessions ids came after it.
func (c *Checker) remembered(prev sessionRec, now int64) bool {
	window, limit := c.settings.SessionWindow, uint64(c.settings.MaxSessions)
	if window <= 0 || limit == 0 {
		return false
	}
	return max(c.sessionNow, now)-prev.now < window && c.sessionSeq-prev.seq < limit/2
}

// sessionShard is the shard of a command a Session may wrap (0 for the
// others, as the ledger records it).
func sessionShard(cmd ledger.Command) uint32 {
	switch c := cmd.(type) {
	case ledger.Grant:
		return c.Shard
	case ledger.Revoke:
		return c.Shard
	case ledger.Release:
		return c.Shard
	case ledger.Transfer:
		return c.Shard
	case ledger.JobEnqueue:
		return c.Shard
	case ledger.JobStart:
		return c.Shard
	case ledger.JobComplete:
		return c.Shard
	case ledger.JobFail:
		return c.Shard
	case ledger.App:
		return c.Shard
	}
	return 0
}

// sessionNow is the proposer's clock a Session's command carries.
func sessionNow(cmd ledger.Command) int64 {
	switch c := cmd.(type) {
	case ledger.JobEnqueue:
		return c.Now
	case ledger.JobStart:
		return c.Now
	case ledger.JobComplete:
		return c.Now
	case ledger.JobFail:
		return c.Now
	case ledger.App:
		return c.Now
	}
	return 0
}
