package ownership

import (
	"errors"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// Agent is the node side of the protocol (docs/protocol.md, node side) as
// one pure state machine, in the style of etcd-io/raft's RawNode: the shell
// feeds it inputs with Step(now, input) and carries out the Ready it
// returns — commands to propose, the renewal to send (cluster version 4),
// acting-set transitions, and the local time at which to step it again. It
// holds the lease Tracker, the heartbeat and renewal schedule and the
// classification of their outcomes, the shards the
// application resigned, drain reconciliation (the node's drain wish against
// its own NodeRecord) and the acting query with the node's guard.
//
// It reads no clock, starts no goroutine, does no I/O and draws no random
// number; it is not safe for concurrent use. node/ wraps it in goroutines
// and one mutex; the simulator drives the very same type.
type Agent struct {
	cfg Config
	tr  *Tracker

	// nextHeartbeat is when the next heartbeat is due (zero: now).
	nextHeartbeat time.Time
	// inflight maps the tokens of heartbeats asked and not yet answered to
	// their ask time; asks older than Lease no longer count as in flight.
	inflight map[uint64]time.Time

	lastAck time.Time
	failing int
	// renewing: the last ready found the agent renewing (Tracker.Registered
	// under cluster version 4) rather than heartbeating.
	renewing bool

	// drainWish is what the node wants its NodeRecord's Draining flag to
	// be; drainAsked is the local time it last proposed it (zero: never).
	drainWish  bool
	drainAsked time.Time

	// Words (cluster version 6, word.go): the ask in flight (token 0:
	// none) and its local time, and when the next may be sent after a
	// failure.
	wordToken uint64
	wordAsked time.Time
	wordRetry time.Time
	nextWord  uint64
	// prevWord is the ask before the one in flight, still answerable (its
	// words count from its own, earlier, ask time).
	prevWord      uint64
	prevWordAsked time.Time
}

// MaxHeartbeatsInFlight bounds the heartbeats an Agent has asked for and
// not yet seen answered, so a slow commit does not delay the next ask but a
// dead control group does not pile them up.
const MaxHeartbeatsInFlight = 2

// AgentInput is one input of Agent.Step: Tick, Observed, HeartbeatOutcome,
// RenewOutcome, ShardDrained, ShardResigned or DrainWish.
type AgentInput interface{ agentInput() }

// Tick reports that time passed (a timer fired at or after Ready.WakeAt).
type Tick struct{}

// Observed reports records this node's replica applied, up to log index
// Applied: every node and shard record an applied entry changed (or all of
// them). Records of other nodes' shards are fine to include.
type Observed struct {
	Applied uint64
	Nodes   []ledger.NodeRecord
	Shards  []ledger.ShardRecord
	// Version is the cluster's active version the replica shows at Applied
	// (State.ActiveVersion; 0 is read as "before version 4"). From
	// ledger.VersionLeaseRenewals on the agent renews off the log.
	Version uint32
}

// HeartbeatOutcome reports the answer to the heartbeat of Token: Err when
// nothing was committed or the outcome is unknown, else the ledger's Result
// and the entry's log Index.
type HeartbeatOutcome struct {
	Token  uint64
	Index  uint64
	Result ledger.Result
	Err    error
}

// RenewOutcome reports the answer to the renewal of Token (cluster version
// 4). Err nil: a leader accepted it after receiving it, then confirmed its
// leadership with a quorum round, and CommitIndex is its last log index
// read after receipt; the lease extends once the replica applied
// CommitIndex. Err matching ledger.ErrStaleLiveness or
// ledger.ErrStaleIncarnation: refused, Record is the leader's record of the
// node (judged like a rejected heartbeat: register again). Any other Err
// (no leader, not established, ErrExpiring, a timeout): failed.
type RenewOutcome struct {
	Token       uint64
	CommitIndex uint64
	Record      ledger.NodeRecord
	Err         error
}

// ShardDrained reports that the application's workers on the revoked
// shard at Epoch returned: the node stops acting and hands it over.
type ShardDrained struct {
	Shard uint32
	Epoch uint64
}

// ShardResigned reports that the application gives the shard up at Epoch
// (Election.Resign): the node stops acting on it at once and never acts on
// it at that epoch again.
type ShardResigned struct {
	Shard uint32
	Epoch uint64
}

// DrainWish sets what the node wants its Draining flag to be; the agent
// proposes SetDraining now and again until its NodeRecord agrees
// (SetDraining is not a compare-and-set: a delayed duplicate can flip it).
type DrainWish struct{ Draining bool }

func (Tick) agentInput()             {}
func (Observed) agentInput()         {}
func (HeartbeatOutcome) agentInput() {}
func (RenewOutcome) agentInput()     {}
func (ShardDrained) agentInput()     {}
func (ShardResigned) agentInput()    {}
func (DrainWish) agentInput()        {}

// HeartbeatAsk is a heartbeat to propose; report its answer with a
// HeartbeatOutcome carrying Token.
type HeartbeatAsk struct {
	Token   uint64
	Command ledger.Heartbeat
}

// RenewAsk is a lease renewal to send to the control-group leader (cluster
// version 4); report its answer with a RenewOutcome carrying Token.
type RenewAsk struct {
	Token                 uint64
	Node                  string
	Incarnation, Liveness uint64
}

// Verdict classifies a heartbeat's or a renewal's answer.
type Verdict uint8

const (
	VerdictNone     Verdict = iota // the input was not a heartbeat outcome
	VerdictAccepted                // committed and accepted: the lease extends once applied
	VerdictFailed                  // nothing committed, outcome unknown, or refused for another reason
	VerdictExpired                 // rejected: the node was expired; it rejoins at the current epoch
	VerdictFenced                  // rejected: a newer incarnation of the node is registered
	VerdictVersion                 // refused: this binary cannot run at the cluster's version
)

// Ready is what one Step asks the shell to do.
type Ready struct {
	// Heartbeat, when not nil, is a heartbeat to propose now.
	Heartbeat *HeartbeatAsk
	// Renew, when not nil, is a renewal to send to the leader now (cluster
	// version 4: it replaces the heartbeat once the node is registered).
	Renew *RenewAsk
	// Proposals are commands to propose now, in order: handoffs (Release or
	// Transfer) and SetDraining. Their answers need not be reported: the
	// agent sees their effect in later Observed records.
	Proposals []ledger.Command
	// Changes are the acting set's transitions since the last Step (see
	// Tracker.Changes): start or cancel workers.
	Changes []Change
	// Verdict classifies a HeartbeatOutcome or RenewOutcome input; Record
	// is the node record its answer carried.
	Verdict Verdict
	Record  ledger.NodeRecord
	// WakeAt is the local time to Step again (with Tick) unless another
	// input comes first: the next heartbeat, lease or drain deadline.
	WakeAt time.Time
	// WordAsk, when not nil, is a request for words to send to the
	// leader now (cluster version 6); report its answer with a
	// WordOutcome carrying its Token.
	WordAsk *WordAsk
}

// Acting is the acting state of one shard (Agent.Acting).
type Acting struct {
	Epoch uint64
	// Until is the local time acting ends unless the lease is renewed.
	Until time.Time
	// Revoking: the node may act only to drain the shard.
	Revoking bool
}

// NewAgent returns the agent of one process lifetime (incarnation) of node
// id.
func NewAgent(cfg Config, id string, incarnation uint64) (*Agent, error) {
	tr, err := NewTracker(cfg, id, incarnation)
	if err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, tr: tr, inflight: make(map[uint64]time.Time)}, nil
}

// Step feeds one input at local monotonic time now and returns what to do.
// now must not go backwards between calls.
func (a *Agent) Step(now time.Time, in AgentInput) Ready {
	var rd Ready
	switch in := in.(type) {
	case Tick, nil:
	case Observed:
		a.observe(now, in)
	case HeartbeatOutcome:
		rd.Verdict, rd.Record = a.heartbeatOutcome(now, in)
	case RenewOutcome:
		rd.Verdict, rd.Record = a.renewOutcome(now, in)
	case ShardDrained:
		a.tr.Drained(in.Shard, in.Epoch)
	case ShardResigned:
		a.tr.Resigned(in.Shard, in.Epoch)
	case DrainWish:
		a.drainWish = in.Draining
		rd.Proposals = append(rd.Proposals, a.setDraining(now))
	case WordOutcome:
		a.wordOutcome(now, in)
	}
	a.ready(now, &rd)
	return rd
}

func (a *Agent) observe(now time.Time, in Observed) {
	for _, n := range in.Nodes {
		a.tr.ObserveNode(n)
	}
	for _, r := range in.Shards {
		a.tr.ObserveShard(now, r)
	}
	a.tr.ClusterVersion(in.Version)
	a.tr.Applied(in.Applied)
}

// heartbeatOutcome is the one place a heartbeat's answer is judged.
func (a *Agent) heartbeatOutcome(now time.Time, in HeartbeatOutcome) (Verdict, ledger.NodeRecord) {
	delete(a.inflight, in.Token)
	r := in.Result
	switch {
	case in.Err != nil:
		a.tr.HeartbeatFailed(in.Token)
		a.failing++
		return VerdictFailed, r.Node
	case r.Err == nil:
		a.tr.HeartbeatAcked(in.Token, in.Index, r.Node, now)
		a.lastAck, a.failing = now, 0
		return VerdictAccepted, r.Node
	case errors.Is(r.Err, ledger.ErrStaleLiveness), errors.Is(r.Err, ledger.ErrStaleIncarnation):
		return a.rejected(now, in.Token, r.Node), r.Node
	case errors.Is(r.Err, ledger.ErrVersion):
		a.tr.HeartbeatFailed(in.Token)
		a.failing++
		return VerdictVersion, r.Node
	default:
		a.tr.HeartbeatFailed(in.Token)
		a.failing++
		return VerdictFailed, r.Node
	}
}

// rejected judges a heartbeat or renewal refused as stale: fenced by a
// newer incarnation, or expired (register again at the current epoch).
func (a *Agent) rejected(now time.Time, token uint64, rec ledger.NodeRecord) Verdict {
	a.tr.HeartbeatRejected(token, rec, now)
	a.failing++
	if a.tr.Fenced() {
		return VerdictFenced
	}
	return VerdictExpired
}

// renewOutcome is the one place a renewal's answer is judged.
func (a *Agent) renewOutcome(now time.Time, in RenewOutcome) (Verdict, ledger.NodeRecord) {
	delete(a.inflight, in.Token)
	switch {
	case in.Err == nil:
		a.tr.RenewAcked(in.Token, in.CommitIndex, now)
		a.lastAck, a.failing = now, 0
		return VerdictAccepted, in.Record
	case errors.Is(in.Err, ledger.ErrStaleLiveness), errors.Is(in.Err, ledger.ErrStaleIncarnation):
		return a.rejected(now, in.Token, in.Record), in.Record
	default:
		a.tr.HeartbeatFailed(in.Token)
		a.failing++
		return VerdictFailed, in.Record
	}
}

// renewMode reports whether the agent renews off the log instead of
// heartbeating: cluster version 4 is active in its replica and its own
// record shows it registered (Tracker.Registered).
func (a *Agent) renewMode() bool {
	return a.tr.version >= ledger.VersionLeaseRenewals && a.tr.Registered()
}

func (a *Agent) setDraining(now time.Time) ledger.Command {
	a.drainAsked = now
	return ledger.SetDraining{Node: a.tr.id, Incarnation: a.tr.inc, Draining: a.drainWish, Now: now.UnixNano()}
}

// drainRetry is how long the agent waits for its NodeRecord to show a
// proposed drain wish before proposing it again.
func (a *Agent) drainRetry() time.Duration { return 2 * a.cfg.RenewEvery }

// ready fills the outputs that depend only on state and time.
func (a *Agent) ready(now time.Time, rd *Ready) {
	for tok, asked := range a.inflight {
		if now.Sub(asked) >= a.cfg.Lease {
			delete(a.inflight, tok)
			a.tr.HeartbeatFailed(tok)
		}
	}
	renew := a.renewMode()
	if renew && !a.renewing {
		// Registered (or version 4 just became active): renew at once
		// rather than after RenewEvery.
		a.nextHeartbeat = now
	}
	a.renewing = renew
	if !a.tr.Fenced() && !now.Before(a.nextHeartbeat) && len(a.inflight) < MaxHeartbeatsInFlight {
		if renew {
			tok, r := a.tr.RenewAsked(now)
			a.inflight[tok] = now
			rd.Renew = &r
		} else {
			tok, hb := a.tr.HeartbeatAsked(now)
			a.inflight[tok] = now
			rd.Heartbeat = &HeartbeatAsk{Token: tok, Command: hb}
		}
		a.nextHeartbeat = now.Add(a.cfg.RenewEvery)
	}
	// Drain reconciliation: the wish against the node's own record.
	if self, ok := a.self(); ok && self.Draining != a.drainWish &&
		now.Sub(a.drainAsked) >= a.drainRetry() && !a.tr.Fenced() {
		rd.Proposals = append(rd.Proposals, a.setDraining(now))
	}
	rd.Proposals = append(rd.Proposals, a.tr.Handoffs(now)...)
	a.askWords(now, rd)
	rd.Changes = a.tr.Changes(now)
	rd.WakeAt = a.nextHeartbeat
	if len(a.inflight) >= MaxHeartbeatsInFlight {
		// No slot: wake when the oldest ask stops counting, if later.
		var free time.Time
		for _, asked := range a.inflight {
			if d := asked.Add(a.cfg.Lease); free.IsZero() || d.Before(free) {
				free = d
			}
		}
		if free.After(rd.WakeAt) {
			rd.WakeAt = free
		}
	}
	if d := a.tr.NextDeadline(now); !d.IsZero() && d.Before(rd.WakeAt) {
		rd.WakeAt = d
	}
	if a.wordToken != 0 {
		if d := a.wordAsked.Add(a.wordPoll()); d.Before(rd.WakeAt) {
			rd.WakeAt = d
		}
	} else if a.tr.version >= ledger.VersionHandoffWords && a.wordRetry.After(now) && a.wordRetry.Before(rd.WakeAt) {
		rd.WakeAt = a.wordRetry
	}
	if self, ok := a.self(); ok && self.Draining != a.drainWish {
		if d := a.drainAsked.Add(a.drainRetry()); d.Before(rd.WakeAt) {
			rd.WakeAt = d
		}
	}
}

// self returns this process's own NodeRecord as the replica shows it.
func (a *Agent) self() (ledger.NodeRecord, bool) {
	return a.tr.self, a.tr.selfKnown && a.tr.self.Incarnation == a.tr.inc
}

// Acting reports whether this node may act on shard at now by the lease
// protocol (docs/protocol.md, node side, rule 4), including a revoked shard
// it may only drain, or on the old owner's word (cluster version 6; Until
// is then the word's end). It changes nothing.
func (a *Agent) Acting(now time.Time, shard uint32) (Acting, bool) {
	c, ok := a.tr.current(shard, now)
	if !ok {
		return Acting{}, false
	}
	until := a.tr.LeaseEnd()
	if a.tr.shards[shard] == nil {
		until = c.Deadline
	}
	return Acting{Epoch: c.Epoch, Until: until, Revoking: c.Draining}, true
}

// OnWord reports whether the node acts on shard at now on the old owner's
// word (cluster version 6) rather than as its committed owner.
func (a *Agent) OnWord(now time.Time, shard uint32) bool { return a.tr.OnWord(shard, now) }

// wordPoll is how long an ask for words may stay unanswered before the
// agent asks again: the leader answers empty after WordHold, and a word
// is counted from its ask, so an old ask would shorten every word it
// carries.
func (a *Agent) wordPoll() time.Duration { return 2 * WordHold(a.cfg) }

// WordHold is how long the leader holds an ask for words with nothing to
// relay before it answers empty: RenewEvery/2.
func WordHold(cfg Config) time.Duration { return cfg.RenewEvery / 2 }

// askWords sends an ask for words when the cluster runs version 6, the
// node is registered and none is in flight (or the one in flight is
// older than wordPoll).
func (a *Agent) askWords(now time.Time, rd *Ready) {
	if a.tr.version < ledger.VersionHandoffWords || a.tr.Fenced() || !a.tr.Registered() {
		a.wordToken, a.prevWord = 0, 0
		return
	}
	if a.wordToken != 0 && now.Sub(a.wordAsked) < a.wordPoll() || a.wordToken == 0 && now.Before(a.wordRetry) {
		return
	}
	a.nextWord++
	a.prevWord, a.prevWordAsked = a.wordToken, a.wordAsked
	a.wordToken, a.wordAsked = a.nextWord, now
	rd.WordAsk = &WordAsk{Token: a.wordToken, Node: a.tr.id}
}

// wordOutcome takes the answer to the ask in flight or to the one before
// it: its words count from that ask's time (WordUntil). An answer to an
// older ask is dropped.
func (a *Agent) wordOutcome(now time.Time, in WordOutcome) {
	var asked time.Time
	switch {
	case in.Token == 0:
		return
	case in.Token == a.wordToken:
		asked, a.wordToken = a.wordAsked, 0
		if in.Err != nil {
			a.wordRetry = now.Add(a.cfg.RenewEvery / 4)
		}
	case in.Token == a.prevWord:
		asked, a.prevWord = a.prevWordAsked, 0
	default:
		return
	}
	if in.Err != nil {
		return
	}
	for _, w := range in.Words {
		a.tr.Word(w, asked)
	}
}

// Guard is how long before its lease ends a node stops handing out tokens,
// so a worker that checks its token does not start work it cannot finish
// inside the lease: max(Lease/50, RenewEvery/2).
func (a *Agent) Guard() time.Duration { return max(a.cfg.Lease/50, a.cfg.RenewEvery/2) }

// Token reports the fencing epoch of shard if the node may start work on it
// at now: acting, not revoked, and at least Guard before the lease ends. It
// returns the local time the token stops being handed out.
func (a *Agent) Token(now time.Time, shard uint32) (epoch uint64, until time.Time, ok bool) {
	ac, ok := a.Acting(now, shard)
	if !ok {
		return 0, time.Time{}, false
	}
	return Change{Shard: shard, Epoch: ac.Epoch, Acting: true, Draining: ac.Revoking, Deadline: ac.Until}.Token(now, a.Guard())
}

// Token is the token rule over an acting change c (Ready.Changes), as
// node/ keeps them: work may start at now on c's epoch iff c is acting,
// not draining, and now is at least guard (Agent.Guard) before c's
// deadline, which is the returned until.
func (c Change) Token(now time.Time, guard time.Duration) (epoch uint64, until time.Time, ok bool) {
	if !c.Acting || c.Draining {
		return 0, time.Time{}, false
	}
	until = c.Deadline.Add(-guard)
	if !now.Before(until) {
		return 0, time.Time{}, false
	}
	return c.Epoch, until, true
}

// ActingShards returns the shards the node acts on at now, sorted.
func (a *Agent) ActingShards(now time.Time) []uint32 { return a.tr.ActingShards(now) }

// Wedged returns the shards revoked from this node that it has not handed
// over for longer than DrainTimeout+Lease, sorted: the application's
// workers did not return (docs/operations.md).
func (a *Agent) Wedged(now time.Time) []uint32 {
	var out []uint32
	wedge := a.cfg.DrainTimeout + a.cfg.Lease
	for s, st := range a.tr.shards {
		if st.rec.State == ledger.ShardRevoking && !st.revokeSeen.IsZero() && now.Sub(st.revokeSeen) > wedge {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Status is the agent's lease bookkeeping.
type Status struct {
	Liveness uint64
	LeaseEnd time.Time // zero: no lease
	LastAck  time.Time // zero: no heartbeat accepted yet
	Failing  int       // heartbeats not accepted since the last accepted one
	Fenced   bool      // a newer incarnation is registered: never acts again
	Applied  uint64    // the last log index observed
}

// Status returns the agent's lease bookkeeping.
func (a *Agent) Status() Status {
	return Status{Liveness: a.tr.Liveness(), LeaseEnd: a.tr.LeaseEnd(), LastAck: a.lastAck, Failing: a.failing,
		Fenced: a.tr.Fenced(), Applied: a.tr.applied}
}

// Touched returns the node ids and shards whose records a command can
// change, so a shell that feeds the agent entry by entry (the simulator)
// observes only those: each kind declares them in ledger (ledger.Touched).
func Touched(c ledger.Command) (nodes []string, shards []uint32) { return ledger.Touched(c) }
