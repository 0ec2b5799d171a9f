package ownership

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/ledger"
)

// TestObservedSinceEqualsFull: an agent fed by ObservedSince (the shard
// records the change feed names since the state it last observed) and an
// agent fed every record of every state stay the same agent — identical
// Readys (proposals, acting changes, heartbeat and renewal asks, wake
// times), acting sets, tokens and lease status at every step — across
// random command sequences: grants to it and to others, revocations
// toward it, releases, transfers, its own handoffs and drain wishes,
// heartbeats and renewals (accepted, failed, refused), expiries and
// forgets of it and of others, a newer incarnation fencing it, pins,
// exclusions, node revocations, fenced-takeover policy, cluster version
// raises up to words (version 6), relayed words, falling behind the
// bounded feed, and snapshot restores. The seed of a failure is printed;
// replay one with TENURE_AGENTFEED_SEED.
func TestObservedSinceEqualsFull(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, uint64(time.Now().UnixNano())}
	if s, err := strconv.ParseUint(os.Getenv("TENURE_AGENTFEED_SEED"), 10, 64); err == nil && s != 0 {
		seeds = []uint64{s}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r, err := runAgentFeed(seed, 4000)
			if err != nil {
				t.Fatalf("seed %d (TENURE_AGENTFEED_SEED=%d): %v", seed, seed, err)
			}
			// The run must exercise what it claims to: the agent acted,
			// handed shards over, and was fed from the feed mostly.
			if r.acted == 0 || r.handoffs == 0 || r.incremental < r.observed/2 || r.fullReads == 0 || r.renewals == 0 {
				t.Fatalf("seed %d: a weak run: %+v", seed, r)
			}
			t.Logf("seed %d: %+v", seed, r)
		})
	}
}

// agentFeedRun is one run of TestObservedSinceEqualsFull.
type agentFeedRun struct {
	r    *rand.Rand
	lcfg ledger.Config
	f    *ledger.FSM
	idx  uint64
	now  time.Time

	full, feed *Agent
	saw        *ledger.State // the state feed last observed

	hbs    []HeartbeatAsk // heartbeats asked, not answered yet
	renews []RenewAsk
	words  []WordAsk
	props  []ledger.Command // proposals not committed yet

	stats      agentFeedStats
	last       string // the last action, for the failure message
	fenceAfter int    // steps before a newer incarnation may fence the agent
}

type agentFeedStats struct {
	steps, observed, incremental, fullReads, acted, handoffs, restores int
	renewals, words, fenced                                            int
}

const (
	afSelf   = "a"
	afShards = 24
)

var afNodes = []string{"a", "b", "c", "d"}

func runAgentFeed(seed uint64, steps int) (agentFeedStats, error) {
	cfg := TestConfig()
	run := &agentFeedRun{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)), lcfg: ledger.DefaultConfig(), now: t0, fenceAfter: steps * 3 / 4}
	var err error
	if run.f, err = ledger.NewFSM(run.lcfg); err != nil {
		return run.stats, err
	}
	if run.full, err = NewAgent(cfg, afSelf, 1); err != nil {
		return run.stats, err
	}
	if run.feed, err = NewAgent(cfg, afSelf, 1); err != nil {
		return run.stats, err
	}
	for i := range steps {
		run.stats.steps = i + 1
		if err := run.step(); err != nil {
			return run.stats, fmt.Errorf("step %d (%s): %w", i+1, run.last, err)
		}
	}
	return run.stats, nil
}

// apply commits c to the ledger; refusals are part of the game.
func (r *agentFeedRun) apply(c ledger.Command) ledger.Result {
	r.idx++
	return r.f.ApplyCommand(r.idx, c)
}

func (r *agentFeedRun) step() error {
	r.now = r.now.Add(time.Duration(r.r.IntN(int(60 * time.Millisecond))))
	switch k := r.r.IntN(100); {
	case k < 40:
		n := 1
		if r.r.IntN(400) == 0 {
			n = 1100 // fall behind the bounded feed (maxFeedLinks)
		}
		for range n {
			c := r.command()
			r.last = ledger.FormatCommand(c)
			r.apply(c)
		}
		if r.r.IntN(3) == 0 {
			return nil // observe later, several entries at once
		}
		return r.observe()
	case k < 50 && len(r.props) > 0:
		r.last = "commit the agent's proposals"
		for _, c := range r.props {
			r.apply(c)
		}
		r.props = nil
		return r.observe()
	case k < 62 && len(r.hbs) > 0:
		ask := r.hbs[0]
		r.hbs = r.hbs[1:]
		if r.r.IntN(5) == 0 {
			r.last = "heartbeat failed"
			return r.both(HeartbeatOutcome{Token: ask.Token, Err: errors.New("lost")})
		}
		r.last = "heartbeat " + ledger.FormatCommand(ask.Command)
		res := r.apply(ask.Command)
		if err := r.both(HeartbeatOutcome{Token: ask.Token, Index: r.idx, Result: res}); err != nil {
			return err
		}
		return r.observe()
	case k < 70 && len(r.renews) > 0:
		ask := r.renews[0]
		r.renews = r.renews[1:]
		rec, ok := r.f.State().Node(ask.Node)
		switch {
		case r.r.IntN(5) == 0:
			r.last = "renewal failed"
			return r.both(RenewOutcome{Token: ask.Token, Err: errors.New("no leader")})
		case !ok || rec.Incarnation != ask.Incarnation:
			r.last = "renewal refused (incarnation)"
			return r.both(RenewOutcome{Token: ask.Token, Record: rec, Err: ledger.ErrStaleIncarnation})
		case rec.Liveness != ask.Liveness:
			r.last = "renewal refused (liveness)"
			return r.both(RenewOutcome{Token: ask.Token, Record: rec, Err: ledger.ErrStaleLiveness})
		}
		r.last = "renewal accepted"
		r.stats.renewals++
		return r.both(RenewOutcome{Token: ask.Token, CommitIndex: r.idx, Record: rec})
	case k < 74 && len(r.words) > 0:
		ask := r.words[0]
		r.words = r.words[1:]
		r.last = "words"
		ws := r.relay()
		r.stats.words += len(ws)
		return r.both(WordOutcome{Token: ask.Token, Words: ws})
	case k < 78:
		s := uint32(r.r.IntN(afShards))
		a, ok := r.full.Acting(r.now, s)
		if !ok {
			return r.both(Tick{})
		}
		if r.r.IntN(2) == 0 {
			r.last = fmt.Sprintf("shard %d drained at %d", s, a.Epoch)
			return r.both(ShardDrained{Shard: s, Epoch: a.Epoch})
		}
		r.last = fmt.Sprintf("shard %d resigned at %d", s, a.Epoch)
		return r.both(ShardResigned{Shard: s, Epoch: a.Epoch})
	case k < 80:
		r.last = "drain wish"
		return r.both(DrainWish{Draining: r.r.IntN(3) == 0})
	case k < 81 && r.r.IntN(4) == 0:
		r.last = "snapshot restore"
		r.stats.restores++
		g, err := restoreFSM(r.f, r.lcfg)
		if err != nil {
			return err
		}
		r.f = g
		return r.observe()
	default:
		r.last = "tick"
		return r.both(Tick{})
	}
}

// observe feeds the replica's state: every record to full, ObservedSince
// to feed.
func (r *agentFeedRun) observe() error {
	st := r.f.State()
	all := Observed{Applied: st.AppliedIndex(), Nodes: st.Nodes(), Shards: st.Shards(), Version: st.ActiveVersion()}
	in := ObservedSince(r.saw, st)
	r.saw = st
	r.stats.observed++
	if len(in.Shards) == len(all.Shards) {
		r.stats.fullReads++
	} else {
		r.stats.incremental++
	}
	return r.stepBoth(all, in)
}

func (r *agentFeedRun) both(in AgentInput) error { return r.stepBoth(in, in) }

// stepBoth steps full with a and feed with b at the same time and
// compares everything the agents tell.
func (r *agentFeedRun) stepBoth(a, b AgentInput) error {
	ra := r.full.Step(r.now, a)
	rb := r.feed.Step(r.now, b)
	if !reflect.DeepEqual(ra, rb) {
		return fmt.Errorf("Ready differs:\n full %+v\n feed %+v", ra, rb)
	}
	if ra.Heartbeat != nil {
		r.hbs = append(r.hbs, *ra.Heartbeat)
	}
	if ra.Renew != nil {
		r.renews = append(r.renews, *ra.Renew)
	}
	if ra.WordAsk != nil {
		r.words = append(r.words, *ra.WordAsk)
	}
	for _, c := range ra.Proposals {
		if _, ok := c.(ledger.SetDraining); !ok {
			r.stats.handoffs++
		}
	}
	r.props = append(r.props, ra.Proposals...)
	if sa, sb := r.full.Status(), r.feed.Status(); sa != sb {
		return fmt.Errorf("Status differs: full %+v, feed %+v", sa, sb)
	} else if sa.Fenced {
		r.stats.fenced++
	}
	if sa, sb := r.full.ActingShards(r.now), r.feed.ActingShards(r.now); !slices.Equal(sa, sb) {
		return fmt.Errorf("acting set differs: full %v, feed %v", sa, sb)
	} else if len(sa) > 0 {
		r.stats.acted++
	}
	if wa, wb := r.full.Wedged(r.now), r.feed.Wedged(r.now); !slices.Equal(wa, wb) {
		return fmt.Errorf("wedged differs: full %v, feed %v", wa, wb)
	}
	for s := range uint32(afShards) {
		ea, ua, oka := r.full.Token(r.now, s)
		eb, ub, okb := r.feed.Token(r.now, s)
		if ea != eb || !ua.Equal(ub) || oka != okb {
			return fmt.Errorf("shard %d token differs: full %d %v %v, feed %d %v %v", s, ea, ua, oka, eb, ub, okb)
		}
		aa, oka := r.full.Acting(r.now, s)
		ab, okb := r.feed.Acting(r.now, s)
		if aa != ab || oka != okb {
			return fmt.Errorf("shard %d acting differs: full %+v %v, feed %+v %v", s, aa, oka, ab, okb)
		}
	}
	return nil
}

// relay is the words a leader might relay to the agent: for shards the
// replica shows revoked toward it (at their epoch, or a stale one), and
// now and then for an arbitrary shard.
func (r *agentFeedRun) relay() []Word {
	var out []Word
	r.f.State().EachShard(func(rec ledger.ShardRecord) bool {
		if rec.State == ledger.ShardRevoking && rec.Target == afSelf && r.r.IntN(2) == 0 {
			e := rec.Epoch
			if r.r.IntN(4) == 0 && e > 0 {
				e--
			}
			out = append(out, Word{Shard: rec.Shard, Epoch: e, From: rec.Owner, To: afSelf, Valid: time.Duration(r.r.IntN(int(2 * time.Second)))})
		}
		return true
	})
	if r.r.IntN(4) == 0 {
		out = append(out, Word{Shard: uint32(r.r.IntN(afShards)), Epoch: uint64(r.r.IntN(6)), From: "b", To: afSelf, Valid: time.Second})
	}
	return out
}

// command draws a ledger command against the current state, biased
// toward accepted ones and toward the agent's own node and shards.
func (r *agentFeedRun) command() ledger.Command {
	st := r.f.State()
	ln := r.now.UnixNano()
	node := afNodes[r.r.IntN(len(afNodes))]
	n, known := st.Node(node)
	shard := uint32(r.r.IntN(afShards))
	rec, _ := st.Shard(shard)
	switch k := r.r.IntN(100); {
	case k < 12: // register, renew or restart another node
		if node == afSelf {
			node = "b"
			n, known = st.Node(node)
		}
		inc := n.Incarnation
		if !known || r.r.IntN(5) == 0 {
			inc++
		}
		return ledger.Heartbeat{Node: node, Incarnation: inc, Liveness: n.Liveness, Now: ln,
			MinVersion: ledger.MinClusterVersion, MaxVersion: ledger.MaxClusterVersion}
	case k < 13 && r.r.IntN(8) == 0 && r.stats.steps > r.fenceAfter:
		// A newer incarnation of the agent's node: it is fenced for good
		// (late in the run, so the run exercises the rest first).
		self, _ := st.Node(afSelf)
		return ledger.Heartbeat{Node: afSelf, Incarnation: max(self.Incarnation, 1) + 1, Now: ln,
			MinVersion: ledger.MinClusterVersion, MaxVersion: ledger.MaxClusterVersion}
	case k < 18:
		return ledger.ExpireNode{Node: node, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq}
	case k < 19:
		return ledger.ForgetNode{Node: node, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq}
	case k < 40:
		if r.r.IntN(3) != 0 {
			node = afSelf
			n, _ = st.Node(node)
		}
		return ledger.Grant{Shard: shard, ExpectedEpoch: rec.Epoch, Owner: node, OwnerIncarnation: n.Incarnation,
			OwnerLiveness: n.Liveness, Now: ln, Takeover: r.r.IntN(3) == 0}
	case k < 55:
		if r.r.IntN(2) == 0 {
			node = afSelf
		}
		return ledger.Revoke{Shard: shard, Epoch: rec.Epoch, Target: node, Now: ln}
	case k < 62:
		return ledger.Release{Shard: shard, Epoch: rec.Epoch, Owner: rec.Owner, Now: ln, Avoid: r.r.IntN(2) == 0}
	case k < 72:
		return ledger.Transfer{Shard: shard, Epoch: rec.Epoch, From: rec.Owner, To: node, ToIncarnation: n.Incarnation,
			ToLiveness: n.Liveness, Now: ln}
	case k < 76:
		return ledger.SetDraining{Node: node, Incarnation: n.Incarnation, Draining: r.r.IntN(2) == 0, Now: ln}
	case k < 78:
		v := st.Cluster().Version
		if r.r.IntN(2) == 0 {
			v++
		}
		return ledger.ClusterConfig{Name: "feed", Partitions: afShards, Version: min(max(v, 1), ledger.MaxClusterVersion), Now: ln}
	case k < 81:
		p := ""
		if r.r.IntN(2) == 0 {
			p = node
		}
		return ledger.PinShard{Shard: shard, Node: p, Now: ln}
	case k < 83:
		return ledger.ExcludeNode{Node: node, Exclude: r.r.IntN(2) == 0, Now: ln}
	case k < 85:
		last := min(shard+uint32(r.r.IntN(4)), afShards-1)
		return ledger.SetTakeoverPolicy{First: shard, Last: last, Fenced: r.r.IntN(2) == 0, Now: ln}
	case k < 86 && r.r.IntN(3) == 0:
		return ledger.RevokeNode{Node: afNodes[1+r.r.IntN(len(afNodes)-1)], Lift: r.r.IntN(2) == 0, Now: ln}
	default:
		b := ledger.Batch{}
		for range 1 + r.r.IntN(4) {
			if c, ok := r.command().(ledger.Batch); !ok {
				b.Commands = append(b.Commands, c)
			}
		}
		return b
	}
}

// restoreFSM snapshots f into a new FSM, as a replica installing a
// snapshot does.
func restoreFSM(f *ledger.FSM, cfg ledger.Config) (*ledger.FSM, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := snap.Persist(memSink{&buf}); err != nil {
		return nil, err
	}
	g, err := ledger.NewFSM(cfg)
	if err != nil {
		return nil, err
	}
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		return nil, err
	}
	return g, nil
}

type memSink struct{ *bytes.Buffer }

func (memSink) ID() string    { return "agentfeed" }
func (memSink) Cancel() error { return nil }
func (memSink) Close() error  { return nil }

var _ raft.SnapshotSink = memSink{}

// TestObservedSinceFallsBack: ObservedSince reads every shard record
// when the feed cannot tell (no previous state, a table-wide change, a
// snapshot restore), none for the same state, and exactly the changed
// ones otherwise; every node record always.
func TestObservedSinceFallsBack(t *testing.T) {
	lcfg := ledger.DefaultConfig()
	f, err := ledger.NewFSM(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	apply := func(c ledger.Command) {
		idx++
		if r := f.ApplyCommand(idx, c); r.Err != nil {
			t.Fatalf("%s: %v", ledger.FormatCommand(c), r.Err)
		}
	}
	for _, n := range []string{"a", "b"} {
		apply(ledger.Heartbeat{Node: n, Incarnation: 1, Now: 1, MinVersion: ledger.MinClusterVersion, MaxVersion: ledger.MaxClusterVersion})
	}
	apply(ledger.ClusterConfig{Name: "c", Partitions: 8, Version: ledger.MaxClusterVersion, Now: 1})
	for s := range uint32(8) {
		apply(ledger.Grant{Shard: s, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
	}
	shards := func(in Observed) []uint32 {
		var out []uint32
		for _, r := range in.Shards {
			out = append(out, r.Shard)
		}
		return out
	}
	check := func(what string, in Observed, st *ledger.State, want []uint32) {
		t.Helper()
		if got := shards(in); !slices.Equal(got, want) {
			t.Errorf("%s: shards %v, want %v", what, got, want)
		}
		if len(in.Nodes) != 2 || in.Applied != st.AppliedIndex() || in.Version != st.ActiveVersion() {
			t.Errorf("%s: %d nodes, applied %d, version %d; want 2, %d, %d", what, len(in.Nodes), in.Applied, in.Version,
				st.AppliedIndex(), st.ActiveVersion())
		}
	}
	all := []uint32{0, 1, 2, 3, 4, 5, 6, 7}
	st := f.State()
	check("no previous state", ObservedSince(nil, st), st, all)
	check("the same state", ObservedSince(st, st), st, nil)
	prev := st
	apply(ledger.Transfer{Shard: 3, Epoch: 1, From: "a", To: "b", ToIncarnation: 1, ToLiveness: 1, Now: 3})
	apply(ledger.Revoke{Shard: 5, Epoch: 1, Target: "b", Now: 3})
	st = f.State()
	check("a transfer and a revoke", ObservedSince(prev, st), st, []uint32{3, 5})
	prev = st
	apply(ledger.PinShard{Shard: 1, Node: "b", Now: 4})
	st = f.State()
	check("a pin (table-wide)", ObservedSince(prev, st), st, all)
	prev = st
	g, err := restoreFSM(f, lcfg)
	if err != nil {
		t.Fatal(err)
	}
	st = g.State()
	check("a snapshot restore", ObservedSince(prev, st), st, all)
}
