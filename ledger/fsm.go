package ledger

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/tenurehq/tenure/internal/mutation"
)

// StateMachine is an application state machine fed by App commands of one
// type. Apply is called in log order on every replica with the command's
// shard, epoch and log index; it must be deterministic (no clock, no
// randomness, no map order), must not block, and its error becomes the
// command's result (as *AppError). Snapshot returns a point-in-time copy of
// the state (called on the apply goroutine; keep it cheap); Restore replaces
// the state wholesale (nil means empty).
type StateMachine interface {
	Apply(shard uint32, epoch uint64, index uint64, payload []byte) ([]byte, error)
	Snapshot() ([]byte, error)
	Restore(snapshot []byte) error
}

// ApplyFunc is an OnApply hook.
type ApplyFunc func(index uint64, c Command, r Result)

// FSM is the ledger's replicated state machine. It implements raft.FSM and
// raft.BatchingFSM; ApplyCommand is the same logic without raft. Apply
// calls are serialized; State and WaitApplied may be called from any
// goroutine at any time.
type FSM struct {
	cfg Config

	mu    sync.Mutex  // serializes applies, snapshots, restores and registration
	st    *State      // the writer's working state (never published)
	dirty dirtySet    // which of st's tables changed since the last publish
	feed  feedScratch // the shards changed since the last publish (changefeed.go)
	apps  map[string]StateMachine
	hooks []ApplyFunc
	// haltHooks run once when the replica halts.
	haltHooks []func(Halt)
	// digestWant and digests: state hashes requested at log indexes
	// (digest.go).
	digestWant map[uint64]bool
	digests    map[uint64]uint64

	pub atomic.Pointer[State]

	// halt is set once a committed entry could not be decoded: from then on
	// nothing more is applied (HaltedAt).
	halt atomic.Pointer[Halt]

	// entrySpoken is entrySpokenFor of the entry being applied
	// (privilege.go).
	entrySpoken uint32

	waitMu sync.Mutex
	waitCh chan struct{} // closed and replaced on every publish
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// NewFSM returns an empty ledger state machine.
func NewFSM(cfg Config) (*FSM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &FSM{cfg: cfg, st: newState(cfg.Settings()), apps: map[string]StateMachine{}, waitCh: make(chan struct{})}
	f.publish()
	return f, nil
}

// State returns the latest published state: an immutable view, safe to
// keep and read concurrently with Apply.
func (f *FSM) State() *State { return f.pub.Load() }

// RegisterStateMachine registers the application state machine for App
// commands of typ. Register every type on every replica before the first
// command is applied (before raft starts): a replica missing a type would
// reject commands the others accept.
func (f *FSM) RegisterStateMachine(typ string, sm StateMachine) error {
	if typ == "" || len(typ) > MaxStringLen || sm == nil {
		return fmt.Errorf("%w: application type %q (len %d) or nil state machine", ErrInvalid, typ, len(typ))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.apps[typ]; dup {
		return fmt.Errorf("%w: application type %q registered twice", ErrInvalid, typ)
	}
	f.apps[typ] = sm
	return nil
}

// OnApply adds a hook called synchronously on the apply goroutine after
// each command is applied (each command of a Batch separately, with the
// batch's log index), in log order. When it runs, State() already reflects
// at least that command. The hook must not block and must not call Apply or
// OnApply; it delays every later apply by its running time. It is not called
// for state installed by Restore (a snapshot): re-read State after one.
func (f *FSM) OnApply(fn ApplyFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hooks = append(f.hooks, fn)
}

// OnHalt registers fn to run once, on the applying goroutine, when the
// replica halts (HaltedAt). fn must not call back into the FSM.
func (f *FSM) OnHalt(fn func(Halt)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.haltHooks = append(f.haltHooks, fn)
}

// WaitApplied blocks until the FSM has applied index, or ctx ends. Only
// command and configuration entries reach the FSM: to wait for a raft
// barrier or no-op entry, wait for the raft future instead.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.waitMu.Lock()
		ch := f.waitCh
		f.waitMu.Unlock()
		if f.State().applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// dirtySet names groups of tables changed since the last publish: publish
// clones only those and shares the previous (immutable) clones of the rest,
// so a heartbeat does not make the next job command copy job-tree paths.
type dirtySet uint8

const (
	dirtyNodes dirtySet = 1 << iota
	dirtyShards
	dirtyJobs
	dirtySessions
	// dirtyOwners: a node record appeared or changed its incarnation or
	// liveness, which OwnershipValid reads (a heartbeat changes neither).
	dirtyOwners
	dirtyAll = dirtyNodes | dirtyShards | dirtyJobs | dirtySessions | dirtyOwners
)

// ownershipGenerations numbers the published states whose shard records
// or owner validity may differ from the state before
// (State.OwnershipGeneration); one counter for every FSM of the process,
// so a restored or second FSM never repeats a number.
var ownershipGenerations atomic.Uint64

func (f *FSM) publish() {
	prev := f.pub.Load()
	if prev == nil {
		f.dirty = dirtyAll
	}
	if f.dirty&(dirtyShards|dirtyOwners) != 0 {
		from := f.st.ownership
		f.st.ownership = ownershipGenerations.Add(1)
		f.st.changes = f.linkChanges(from, f.st.ownership)
	}
	c := *f.st
	if f.dirty&dirtyNodes != 0 {
		c.nodes = f.st.nodes.Clone()
	} else {
		c.nodes = prev.nodes
	}
	if f.dirty&dirtyShards != 0 {
		c.shards = f.st.shards.Clone()
		c.elections = f.st.elections.Clone()
		c.pins, c.excluded = f.st.pins.Clone(), f.st.excluded.Clone()
	} else {
		c.shards, c.elections = prev.shards, prev.elections
		c.pins, c.excluded = prev.pins, prev.excluded
	}
	if f.dirty&dirtyJobs != 0 {
		c.jobs = f.st.jobs.Clone()
		c.jobIdx = f.st.jobIdx.Clone()
		c.keyIdx = f.st.keyIdx.Clone()
		c.finished = f.st.finished.Clone()
	} else {
		c.jobs, c.jobIdx, c.keyIdx, c.finished = prev.jobs, prev.jobIdx, prev.keyIdx, prev.finished
	}
	if f.dirty&dirtySessions != 0 {
		c.sessions, c.sessionOrder = f.st.sessions.Clone(), f.st.sessionOrder.Clone()
	} else {
		c.sessions, c.sessionOrder = prev.sessions, prev.sessionOrder
	}
	f.dirty = 0
	f.pub.Store(&c)
	f.waitMu.Lock()
	close(f.waitCh)
	f.waitCh = make(chan struct{})
	f.waitMu.Unlock()
}

type applied struct {
	index uint64
	cmd   Command
	res   *Result
}

// ApplyCommand applies one command at log index (the simulator's entry
// point; raft uses Apply/ApplyBatch). index must not go backwards.
func (f *FSM) ApplyCommand(index uint64, c Command) Result {
	return f.ApplyCommandAt(index, c, 0)
}

// ApplyCommandAt is ApplyCommand for an entry the leader appended at
// appendedAt (unix ns; 0: unknown), the log's clock (VersionLogTime).
func (f *FSM) ApplyCommandAt(index uint64, c Command, appendedAt int64) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	var done []applied
	f.tickLogTime(appendedAt)
	f.entrySpoken = f.entrySpokenFor(c)
	r := f.applyTop(index, c, &done)
	f.st.applied = max(f.st.applied, index)
	if len(f.digestWant) > 0 {
		f.takeDigest(index)
	}
	f.publish()
	f.runHooks(done)
	return r
}

// Apply implements raft.FSM. It returns a Result (a value).
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: the whole batch is applied, then
// published once. Each response is a Result (nil for configuration entries).
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]any, len(logs))
	var done []applied
	for i, l := range logs {
		if h := f.halt.Load(); h != nil {
			out[i] = Result{Err: h.err(), Index: l.Index}
			continue
		}
		if l.Type == raft.LogCommand {
			if !l.AppendedAt.IsZero() {
				f.tickLogTime(l.AppendedAt.UnixNano())
			}
			c, err := Decode(l.Data)
			if err == nil {
				f.entrySpoken = f.entrySpokenFor(c)
				err = unreadableAt(c, f.entrySpoken, MaxClusterVersion)
			}
			if err != nil {
				// Skipping the entry would make this replica differ from
				// the others for good: stop applying instead.
				out[i] = Result{Err: f.haltAt(l, err), Index: l.Index}
				continue
			}
			out[i] = f.applyTop(l.Index, c, &done)
		}
		f.st.applied = max(f.st.applied, l.Index)
		if len(f.digestWant) > 0 {
			f.takeDigest(l.Index)
		}
	}
	f.publish()
	f.runHooks(done)
	return out
}

// haltAt stops the replica at l (see Halt) and returns the error every
// entry from l on answers with.
func (f *FSM) haltAt(l *raft.Log, err error) error {
	h := &Halt{Index: l.Index, Err: err}
	if len(l.Data) > 0 {
		h.Version = l.Data[0]
	}
	f.halt.Store(h)
	for _, fn := range f.haltHooks {
		fn(*h)
	}
	return h.err()
}

// Halt describes a committed log entry this replica could not read: an
// encoding version or command kind newer than this binary, or bytes that do
// not decode. The replica has applied everything before Index and nothing
// from Index on; it refuses snapshots (a snapshot would claim the skipped
// entries), so a binary that reads the entry replays the log from the last
// snapshot and catches up.
type Halt struct {
	Index   uint64
	Version byte // the entry's first byte: its encoding version
	Err     error
}

func (h *Halt) err() error {
	return fmt.Errorf("%w at log index %d (entry version %d, this build reads %d to %d): %w",
		ErrHalted, h.Index, h.Version, minVersion, Version, h.Err)
}

// Error describes the halt for logs and health reasons.
func (h Halt) Error() string { return h.err().Error() }

// HaltedAt reports the entry this replica stopped at, if it stopped.
func (f *FSM) HaltedAt() (Halt, bool) {
	if h := f.halt.Load(); h != nil {
		return *h, true
	}
	return Halt{}, false
}

// tickLogTime advances the log's clock to an entry's append time, once the
// cluster runs VersionLogTime: max(previous, appendedAt), so a leader whose
// clock is behind its predecessor's never moves it back.
func (f *FSM) tickLogTime(appendedAt int64) {
	if appendedAt > f.st.logTime && f.st.VersionActive(VersionLogTime) {
		f.st.logTime = appendedAt
	}
}

// jobNow is the time job transitions are judged at: the log's clock once
// the cluster runs VersionLogTime (and an entry carried an append time),
// the proposer's clock (command Now) before.
func (f *FSM) jobNow(proposed int64) int64 {
	if f.st.logTime != 0 && f.st.VersionActive(VersionLogTime) {
		return f.st.logTime
	}
	return proposed
}

func (f *FSM) runHooks(done []applied) {
	for _, d := range done {
		for _, h := range f.hooks {
			h(d.index, d.cmd, *d.res)
		}
	}
}

func (f *FSM) applyTop(index uint64, c Command, done *[]applied) Result {
	hooks := len(f.hooks) > 0
	if b, ok := c.(Batch); ok {
		r := Result{Index: index, Results: make([]Result, len(b.Commands))}
		for i, sc := range b.Commands {
			if _, nested := sc.(Batch); nested {
				r.Results[i] = Result{Index: index, Err: fmt.Errorf("%w: nested batch", ErrInvalid)}
				continue
			}
			r.Results[i] = f.applyOne(index, sc)
			if hooks {
				*done = append(*done, applied{index, sc, &r.Results[i]})
			}
		}
		return r
	}
	r := f.applyOne(index, c)
	if hooks {
		*done = append(*done, applied{index, c, &r})
	}
	return r
}

// applyOne applies one command (not a Batch) by its kind's declaration.
func (f *FSM) applyOne(index uint64, c Command) Result {
	var r Result
	switch e := specOf(c); {
	case c == nil:
		r.Err = fmt.Errorf("%w: nil command", ErrInvalid)
	case e == nil || e.apply == nil:
		r.Err = fmt.Errorf("%w: unknown command type %T", ErrInvalid, c)
	default:
		r = e.apply(f, index, c)
	}
	r.Index = index
	return r
}

// thenPrune applies a settings change or a job command and then drops the
// finished jobs the (new) retention lets go at the job clock.
func thenPrune[C Command](apply func(*FSM, C) Result, now func(C) int64) func(*FSM, uint64, C) Result {
	return func(f *FSM, _ uint64, c C) Result {
		r := apply(f, c)
		f.prune(f.jobNow(now(c)))
		return r
	}
}

// ---- nodes ----

func (f *FSM) heartbeat(c Heartbeat) Result {
	if c.Node == "" {
		return Result{Err: errf(ErrInvalid, "heartbeat with empty node id")}
	}
	n, ok := f.st.Node(c.Node)
	if f.st.revokedNode(c.Node) {
		return Result{Node: n, Err: errf(ErrRevoked, "node %q is revoked (tenure node revocations)", c.Node)}
	}
	if err := f.checkSpeaks(c); err != nil {
		return Result{Node: n, Err: err}
	}
	switch {
	case !ok:
		n = NodeRecord{ID: c.Node, Incarnation: c.Incarnation, Liveness: 1, Seq: 1, HeartbeatAt: c.Now}
	case c.Incarnation > n.Incarnation:
		// A restart: the old incarnation is dead; its grants die with the
		// liveness epoch.
		n = NodeRecord{ID: c.Node, Incarnation: c.Incarnation, Liveness: n.Liveness + 1, Seq: n.Seq + 1, HeartbeatAt: c.Now}
	case c.Incarnation < n.Incarnation && !mutation.On(mutation.HeartbeatStaleIncarnation):
		return Result{Node: n, Err: errf(ErrStaleIncarnation, "node %q incarnation %d, current %d", c.Node, c.Incarnation, n.Incarnation)}
	case c.Liveness == n.Liveness || c.Liveness == 0 || mutation.On(mutation.HeartbeatStaleLiveness):
		n.Seq++
		n.HeartbeatAt = c.Now
	default:
		return Result{Node: n, Err: errf(ErrStaleLiveness, "node %q liveness %d, current %d", c.Node, c.Liveness, n.Liveness)}
	}
	n.MinVersion, n.MaxVersion = c.MinVersion, c.MaxVersion
	f.putNode(n)
	return Result{Node: n}
}

func (f *FSM) expireNode(c ExpireNode) Result {
	n, ok := f.st.Node(c.Node)
	if !ok {
		return Result{Err: errf(ErrUnknownNode, "%q", c.Node)}
	}
	if n.Incarnation != c.Incarnation || n.Liveness != c.Liveness || (n.Seq != c.Seq && !mutation.On(mutation.ExpireIgnoreSeq)) {
		return Result{Node: n, Err: errf(ErrConflict, "expire node %q at (inc %d, liveness %d, seq %d), current (%d, %d, %d)",
			c.Node, c.Incarnation, c.Liveness, c.Seq, n.Incarnation, n.Liveness, n.Seq)}
	}
	n.Liveness++
	f.putNode(n)
	return Result{Node: n}
}

func (f *FSM) setDraining(c SetDraining) Result {
	n, ok := f.st.Node(c.Node)
	if !ok {
		return Result{Err: errf(ErrUnknownNode, "%q", c.Node)}
	}
	if n.Incarnation != c.Incarnation && !mutation.On(mutation.DrainingStaleIncarnation) {
		return Result{Node: n, Err: errf(ErrStaleIncarnation, "node %q incarnation %d, current %d", c.Node, c.Incarnation, n.Incarnation)}
	}
	n.Draining = c.Draining
	f.putNode(n)
	return Result{Node: n}
}

// ---- shards ----

func (f *FSM) shard(id uint32) ShardRecord {
	rec, ok := f.st.Shard(id)
	if !ok {
		rec = ShardRecord{Shard: id}
	}
	return rec
}

// checkNewOwner verifies the grantee's NodeRecord matches (inc, liveness).
func (f *FSM) checkNewOwner(node string, inc, liveness uint64) error {
	n, ok := f.st.Node(node)
	switch {
	case mutation.On(mutation.NewOwnerUnchecked), node == "" && mutation.On(mutation.GrantEmptyOwner):
		return nil
	case !ok:
		return errf(ErrUnknownNode, "%q", node)
	case n.Incarnation != inc:
		return errf(ErrStaleIncarnation, "node %q incarnation %d, current %d", node, inc, n.Incarnation)
	case n.Liveness != liveness:
		return errf(ErrStaleLiveness, "node %q liveness %d, current %d", node, liveness, n.Liveness)
	}
	return nil
}

func (f *FSM) grant(c Grant) Result {
	rec := f.shard(c.Shard)
	if err := staleEpoch(rec, c.ExpectedEpoch, "grant expected", mutation.AcceptStaleEpoch); err != nil {
		return Result{Shard: rec, Err: err}
	}
	if c.Owner == "" && !mutation.On(mutation.GrantEmptyOwner) {
		return Result{Shard: rec, Err: errf(ErrInvalid, "grant of shard %d to empty owner", c.Shard)}
	}
	valid := f.st.OwnershipValid(rec)
	if valid && !(c.Takeover && rec.State == ShardRevoking) && !f.fencedTakeover(c, rec) && !mutation.On(mutation.GrantOverValidOwner) {
		return Result{Shard: rec, Err: errf(ErrShardOwned, "shard %d is %s by %q at epoch %d (takeover %v)", c.Shard, rec.State, rec.Owner, rec.Epoch, c.Takeover)}
	}
	if err := f.checkNewOwner(c.Owner, c.OwnerIncarnation, c.OwnerLiveness); err != nil {
		return Result{Shard: rec, Err: err}
	}
	avoid := rec.AvoidOwner
	if avoid == c.Owner {
		avoid = "" // granted back to the resigner: the hint is spent
	}
	rec = ShardRecord{Shard: c.Shard, Epoch: HandoffEpoch(rec, f.st.VersionActive(VersionHandoffWords), true), Owner: c.Owner,
		OwnerIncarnation: c.OwnerIncarnation, OwnerLiveness: c.OwnerLiveness, State: ShardOwned, ChangedAt: c.Now,
		Reason: c.Reason, AvoidOwner: avoid}
	f.putShard(rec)
	return Result{Shard: rec}
}

// staleEpoch is the ErrStaleEpoch rejection of a shard command (what:
// "revoke for") made at epoch when the shard's record is at another one;
// nil when the epochs match or the mutation sw disables the rule.
func staleEpoch(rec ShardRecord, epoch uint64, what string, sw mutation.Switch) error {
	if rec.Epoch == epoch || mutation.On(sw) {
		return nil
	}
	return errf(ErrStaleEpoch, "shard %d at epoch %d, %s %d", rec.Shard, rec.Epoch, what, epoch)
}

func (f *FSM) revoke(c Revoke) Result {
	rec := f.shard(c.Shard)
	if err := staleEpoch(rec, c.Epoch, "revoke for", mutation.RevokeStaleEpoch); err != nil {
		return Result{Shard: rec, Err: err}
	}
	if rec.State != ShardOwned && !mutation.On(mutation.RevokeNotOwned) {
		return Result{Shard: rec, Err: errf(ErrConflict, "revoke of shard %d in state %s", c.Shard, rec.State)}
	}
	rec.State = ShardRevoking
	rec.Target = c.Target
	rec.ChangedAt = c.Now
	rec.Reason = c.Reason
	f.putShard(rec)
	return Result{Shard: rec}
}

func (f *FSM) release(c Release) Result {
	rec := f.shard(c.Shard)
	if err := staleEpoch(rec, c.Epoch, "release for", mutation.ReleaseStaleEpoch); err != nil {
		return Result{Shard: rec, Err: err}
	}
	if rec.Owner != c.Owner && !mutation.On(mutation.ReleaseNotOwner) {
		return Result{Shard: rec, Err: errf(ErrNotOwner, "release of shard %d by %q, owner %q", c.Shard, c.Owner, rec.Owner)}
	}
	if rec.State == ShardUnowned && !mutation.On(mutation.ReleaseTwice) {
		return Result{Shard: rec, Err: errf(ErrConflict, "shard %d already released at epoch %d", c.Shard, rec.Epoch)}
	}
	if f.st.VersionActive(VersionHandoffWords) && rec.State == ShardRevoking && rec.Target != "" && rec.Target != rec.Owner &&
		!mutation.On(mutation.ReleaseDuringWord) {
		// The target may act at e+1 on the owner's word: only the
		// Transfer to it (or the leader's takeover grant after the wait)
		// moves the shard, never a Release the planner may grant at once.
		return Result{Shard: rec, Err: errf(ErrConflict, "shard %d is handed to %q (Revoking at epoch %d): release refused", c.Shard, rec.Target, rec.Epoch)}
	}
	rec.Epoch = HandoffEpoch(rec, f.st.VersionActive(VersionHandoffWords), false)
	rec.State = ShardUnowned
	rec.Target = ""
	rec.ChangedAt = c.Now
	rec.Reason = "release"
	rec.AvoidOwner = ""
	if c.Avoid {
		rec.Reason = "resign"
		rec.AvoidOwner = c.Owner
	}
	f.putShard(rec)
	return Result{Shard: rec}
}

func (f *FSM) transfer(c Transfer) Result {
	rec := f.shard(c.Shard)
	if err := staleEpoch(rec, c.Epoch, "transfer for", mutation.TransferStaleEpoch); err != nil {
		return Result{Shard: rec, Err: err}
	}
	if (rec.Owner != c.From || !f.st.OwnershipValid(rec)) && !mutation.On(mutation.TransferInvalidOwner) {
		return Result{Shard: rec, Err: errf(ErrNotOwner, "transfer of shard %d by %q, owner %q (%s, valid %v)",
			c.Shard, c.From, rec.Owner, rec.State, f.st.OwnershipValid(rec))}
	}
	if c.To == "" {
		return Result{Shard: rec, Err: errf(ErrInvalid, "transfer of shard %d to empty node", c.Shard)}
	}
	if err := f.checkNewOwner(c.To, c.ToIncarnation, c.ToLiveness); err != nil {
		return Result{Shard: rec, Err: err}
	}
	if f.st.VersionActive(VersionHandoffWords) && rec.State == ShardRevoking && rec.Target != "" && c.To != rec.Target &&
		!mutation.On(mutation.TransferPastTarget) {
		// e+1 is the token the target may have used on a word.
		return Result{Shard: rec, Err: errf(ErrConflict, "transfer of shard %d to %q, revoked toward %q", c.Shard, c.To, rec.Target)}
	}
	rec = ShardRecord{Shard: c.Shard, Epoch: rec.Epoch + 1, Owner: c.To, OwnerIncarnation: c.ToIncarnation,
		OwnerLiveness: c.ToLiveness, State: ShardOwned, ChangedAt: c.Now, Reason: c.Reason}
	f.putShard(rec)
	return Result{Shard: rec}
}

// ---- jobs ----

func (f *FSM) putNode(n NodeRecord) {
	old, ok := f.st.nodes.ReplaceOrInsert(n)
	f.dirty |= dirtyNodes
	if !ok || old.Incarnation != n.Incarnation || old.Liveness != n.Liveness {
		f.dirty |= dirtyOwners
		f.feedOwner(n.ID)
	}
}

func (f *FSM) putShard(r ShardRecord) {
	f.st.shards.ReplaceOrInsert(r)
	f.dirty |= dirtyShards
	f.feedShard(r.Shard)
}

func (f *FSM) putJob(old *JobRecord, j *JobRecord) {
	f.dirty |= dirtyJobs
	if old != nil {
		f.st.jobIdx.Delete(jobIndexKey{old.Shard, old.State, old.ID})
	}
	f.st.jobs.ReplaceOrInsert(jobItem{j.ID, j})
	f.st.jobIdx.ReplaceOrInsert(jobIndexKey{j.Shard, j.State, j.ID})
	if j.State.Finished() && (old == nil || !old.State.Finished()) {
		f.st.finishSeq++
		f.st.finished.ReplaceOrInsert(finishedKey{f.st.finishSeq, j.ID})
	}
}

func (f *FSM) jobEnqueue(c JobEnqueue) Result {
	c.Now = f.jobNow(c.Now) // the job clock (thenPrune prunes at the same time)
	if limit := f.st.settings.MaxPayload; len(c.Payload) > int(limit) {
		return Result{Err: errf(ErrTooLarge, "job payload of %d bytes exceeds %d", len(c.Payload), limit)}
	}
	if c.Key != "" && !mutation.On(mutation.EnqueueDuplicateKey) {
		if id, ok := f.st.jobIDByKey(c.Shard, c.Key); ok {
			j, _ := f.st.Job(id)
			return Result{Job: j, Duplicate: true}
		}
	}
	if f.st.queueFull(c.Shard, c.MaxPending) {
		return Result{Err: errf(ErrQueueFull, "shard %d holds %d pending jobs", c.Shard, c.MaxPending)}
	}
	maxAttempts := c.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = f.st.settings.DefaultMaxAttempts
	}
	f.st.nextJob++
	j := &JobRecord{ID: f.st.nextJob, Shard: c.Shard, Key: c.Key, Type: c.Type, Payload: c.Payload,
		State: JobPending, MaxAttempts: maxAttempts, EnqueuedAt: c.Now, NotBefore: c.Now}
	f.putJob(nil, j)
	if c.Key != "" {
		f.st.keyIdx.ReplaceOrInsert(jobKeyKey{c.Shard, c.Key, j.ID})
	}
	return Result{Job: *j}
}

// lookupJob finds the job and checks it belongs to shard.
func (f *FSM) lookupJob(shard uint32, id uint64) (*JobRecord, error) {
	it, ok := f.st.jobs.Get(jobItem{id: id})
	j := it.j
	if !ok {
		return nil, errf(ErrUnknownJob, "job %d", id)
	}
	if j.Shard != shard {
		return nil, errf(ErrUnknownJob, "job %d is on shard %d, not %d", id, j.Shard, shard)
	}
	return j, nil
}

// after reports whether now > t+d (d ≥ 0), without overflow.
func after(now, t, d int64) bool {
	return now > t && uint64(now)-uint64(t) > uint64(d)
}

// atLeast reports whether now ≥ t+d (d ≥ 0), without overflow.
func atLeast(now, t, d int64) bool {
	return now >= t && uint64(now)-uint64(t) >= uint64(d)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

func (f *FSM) jobStart(c JobStart) Result {
	c.Now = f.jobNow(c.Now) // the job clock (thenPrune prunes at the same time)
	if c.Timeout < 0 {
		return Result{Err: errf(ErrInvalid, "job %d start with negative timeout %d", c.Job, c.Timeout)}
	}
	j, err := f.lookupJob(c.Shard, c.Job)
	if err != nil {
		return Result{Err: err}
	}
	rec := f.shard(c.Shard)
	switch {
	case rec.Epoch != c.Epoch && !mutation.On(mutation.JobStartStaleEpoch):
		return Result{Job: *j, Shard: rec, Err: errf(ErrStaleEpoch, "shard %d at epoch %d, start at %d", c.Shard, rec.Epoch, c.Epoch)}
	case (rec.Owner != c.Owner || !f.st.OwnershipValid(rec)) && !mutation.On(mutation.JobStartNotOwner):
		return Result{Job: *j, Shard: rec, Err: errf(ErrNotOwner, "start on shard %d by %q, owner %q (%s, valid %v)",
			c.Shard, c.Owner, rec.Owner, rec.State, f.st.OwnershipValid(rec))}
	case rec.State != ShardOwned && !mutation.On(mutation.JobStartRevoking):
		return Result{Job: *j, Shard: rec, Err: errf(ErrNotOwner, "start on shard %d while %s", c.Shard, rec.State)}
	case j.State.Finished() && !mutation.On(mutation.JobStartFinished):
		return Result{Job: *j, Err: errf(ErrJobFinished, "job %d is %s", j.ID, j.State)}
	case c.Attempt != j.Attempt && !mutation.On(mutation.JobStartWrongAttempt):
		return Result{Job: *j, Err: errf(ErrWrongAttempt, "job %d start after attempt %d, current %d", j.ID, c.Attempt, j.Attempt)}
	}
	n := *j
	switch j.State {
	case JobPending:
		if c.Now < j.NotBefore && !mutation.On(mutation.JobStartBackoff) {
			return Result{Job: *j, Err: errf(ErrJobState, "job %d backs off until %d, now %d", j.ID, j.NotBefore, c.Now)}
		}
	case JobStarted:
		why, ok := abandoned(*j, rec.Epoch, c.Now)
		if !ok && !mutation.On(mutation.JobStartRunning) {
			return Result{Job: *j, Err: errf(ErrJobState, "job %d attempt %d is running", j.ID, j.Attempt)}
		}
		n.LastError = "attempt " + itoa(uint64(j.Attempt)) + " " + why
		if j.Attempt >= j.MaxAttempts {
			n.State = JobDead
			n.FinishedAt = c.Now
			f.putJob(j, &n)
			return Result{Job: n, Err: errf(ErrJobFinished, "job %d dead-lettered: attempt %d of %d %s", j.ID, j.Attempt, j.MaxAttempts, why)}
		}
	}
	n.State = JobStarted
	n.Attempt = j.Attempt + 1
	n.Owner = c.Owner
	n.Epoch = c.Epoch
	n.StartedAt = c.Now
	n.Timeout = c.Timeout
	f.putJob(j, &n)
	return Result{Job: n}
}

// abandoned reports whether a started job's attempt may be superseded by
// a new start at now on a shard at epoch, and why: the attempt started at
// an older epoch of the shard (its owner lost the shard, so the ledger
// already fences its Complete/Fail out: no need to wait for the timeout),
// or it timed out.
func abandoned(j JobRecord, epoch uint64, now int64) (string, bool) {
	switch {
	case j.Epoch < epoch:
		return "fenced out at epoch " + itoa(j.Epoch), true
	case j.Timeout > 0 && after(now, j.StartedAt, j.Timeout):
		return "timed out", true
	}
	return "", false
}

// checkFinish holds the fencing shared by JobComplete and JobFail.
func (f *FSM) checkFinish(shard uint32, epoch, id uint64, attempt uint32) (*JobRecord, Result, bool) {
	j, err := f.lookupJob(shard, id)
	if err != nil {
		return nil, Result{Err: err}, false
	}
	rec := f.shard(shard)
	switch {
	case j.State.Finished() && !mutation.On(mutation.FinishFinished):
		return nil, Result{Job: *j, Err: errf(ErrJobFinished, "job %d is %s", j.ID, j.State)}, false
	case rec.Epoch != epoch && !mutation.On(mutation.FinishStaleEpoch):
		return nil, Result{Job: *j, Shard: rec, Err: errf(ErrStaleEpoch, "shard %d at epoch %d, job %d finish at %d", shard, rec.Epoch, id, epoch)}, false
	case !f.st.OwnershipValid(rec) && !mutation.On(mutation.FinishInvalidOwner):
		return nil, Result{Job: *j, Shard: rec, Err: errf(ErrNotOwner, "shard %d ownership by %q is not valid", shard, rec.Owner)}, false
	case j.State != JobStarted && !(j.State.Finished() && mutation.On(mutation.FinishFinished)):
		return nil, Result{Job: *j, Err: errf(ErrJobState, "job %d is %s", j.ID, j.State)}, false
	case j.Attempt != attempt && !mutation.On(mutation.FinishWrongAttempt):
		return nil, Result{Job: *j, Err: errf(ErrWrongAttempt, "job %d attempt %d, current %d", j.ID, attempt, j.Attempt)}, false
	case j.Epoch != epoch && !mutation.On(mutation.FinishStaleEpoch):
		return nil, Result{Job: *j, Err: errf(ErrStaleEpoch, "job %d attempt %d started at epoch %d, not %d", j.ID, attempt, j.Epoch, epoch)}, false
	}
	return j, Result{}, true
}

func (f *FSM) jobComplete(c JobComplete) Result {
	c.Now = f.jobNow(c.Now) // the job clock (thenPrune prunes at the same time)
	if limit := f.st.settings.MaxPayload; len(c.Result) > int(limit) {
		return Result{Err: errf(ErrTooLarge, "job result of %d bytes exceeds %d", len(c.Result), limit)}
	}
	j, r, ok := f.checkFinish(c.Shard, c.Epoch, c.Job, c.Attempt)
	if !ok {
		return r
	}
	n := *j
	n.State = JobCompleted
	n.FinishedAt = c.Now
	n.Result = c.Result
	f.putJob(j, &n)
	return Result{Job: n}
}

func (f *FSM) jobFail(c JobFail) Result {
	c.Now = f.jobNow(c.Now) // the job clock (thenPrune prunes at the same time)
	if c.Backoff < 0 {
		return Result{Err: errf(ErrInvalid, "job %d fail with negative backoff %d", c.Job, c.Backoff)}
	}
	j, r, ok := f.checkFinish(c.Shard, c.Epoch, c.Job, c.Attempt)
	if !ok {
		return r
	}
	n := *j
	n.LastError = c.Error
	if j.Attempt >= j.MaxAttempts && !mutation.On(mutation.FailNoDeadLetter) {
		n.State = JobDead
		n.FinishedAt = c.Now
	} else {
		n.State = JobPending
		n.NotBefore = satAdd(c.Now, c.Backoff)
	}
	f.putJob(j, &n)
	return Result{Job: n}
}

// prune drops the oldest finished jobs while there are more than
// MaxFinishedJobs or the oldest finished JobRetention before now.
func (f *FSM) prune(now int64) {
	s := f.st
	for {
		fk, ok := s.finished.Min()
		if !ok {
			return
		}
		it, ok := s.jobs.Get(jobItem{id: fk.id})
		j := it.j
		if ok && s.finished.Len() <= int(s.settings.MaxFinishedJobs) && !atLeast(now, j.FinishedAt, s.settings.JobRetention) {
			return
		}
		s.finished.DeleteMin()
		f.dirty |= dirtyJobs
		if !ok {
			continue
		}
		s.jobs.Delete(it)
		s.jobIdx.Delete(jobIndexKey{j.Shard, j.State, j.ID})
		if j.Key != "" {
			s.keyIdx.Delete(jobKeyKey{j.Shard, j.Key, j.ID})
		}
	}
}

// ---- application commands and settings ----

func (f *FSM) app(index uint64, c App) Result {
	sm, ok := f.apps[c.Type]
	if !ok {
		return Result{Err: errf(ErrUnknownType, "%q", c.Type)}
	}
	if limit := f.st.settings.MaxPayload; len(c.Payload) > int(limit) {
		return Result{Err: errf(ErrTooLarge, "application payload of %d bytes exceeds %d", len(c.Payload), limit)}
	}
	rec := f.shard(c.Shard)
	if rec.Epoch != c.Epoch && !mutation.On(mutation.AppStaleEpoch) {
		return Result{Shard: rec, Err: errf(ErrStaleEpoch, "shard %d at epoch %d, command at %d", c.Shard, rec.Epoch, c.Epoch)}
	}
	if !f.st.OwnershipValid(rec) && !mutation.On(mutation.AppInvalidOwner) {
		return Result{Shard: rec, Err: errf(ErrNotOwner, "shard %d has no valid owner at epoch %d", c.Shard, c.Epoch)}
	}
	resp, err := sm.Apply(c.Shard, c.Epoch, index, c.Payload)
	if err != nil {
		return Result{Err: &AppError{Msg: err.Error()}}
	}
	return Result{Response: resp}
}

func (f *FSM) settings(c Settings) Result {
	if c.JobRetention < 0 {
		return Result{Err: errf(ErrInvalid, "negative job retention %d", c.JobRetention)}
	}
	s := &f.st.settings
	if c.JobRetention != 0 {
		s.JobRetention = c.JobRetention
	}
	if c.MaxFinishedJobs != 0 {
		s.MaxFinishedJobs = c.MaxFinishedJobs
	}
	if c.DefaultMaxAttempts != 0 {
		s.DefaultMaxAttempts = c.DefaultMaxAttempts
	}
	return Result{}
}

// appTypes returns the registered types, sorted.
func (f *FSM) appTypes() []string {
	types := make([]string, 0, len(f.apps))
	for t := range f.apps {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}
