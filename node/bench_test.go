package node

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// BenchmarkToken measures the hot-path ownership check on the in-process
// network (a worker calls it before every side effect).
func BenchmarkToken(b *testing.B) {
	net := NewMemNetwork()
	cfg := memConfig(net, "a")
	n, err := Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close(context.Background())
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := n.Token(uint32(i % cfg.Partitions)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProposeSingleNode measures a fenced application command through
// the real stack on one node (Raft with bolt fsync, ledger, state machine),
// one writer at a time.
func BenchmarkProposeSingleNode(b *testing.B) {
	old, oldID := newControlPlane, loadIdentity
	newControlPlane, loadIdentity = newSoloControl, soloIdentity
	defer func() { newControlPlane, loadIdentity = old, oldID }()
	ctx := context.Background()
	n, err := Start(ctx, soloConfig(nil, b.TempDir(), map[string]StateMachine{"count": &counter{}}))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close(ctx)
	if err := n.WaitSettled(ctx); err != nil {
		b.Fatal(err)
	}
	tok, err := n.Token(1)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := n.Propose(ctx, tok, "count", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProposeSingleNodeParallel is BenchmarkProposeSingleNode with
// concurrent writers (group commit through the ledger's batcher).
func BenchmarkProposeSingleNodeParallel(b *testing.B) {
	old, oldID := newControlPlane, loadIdentity
	newControlPlane, loadIdentity = newSoloControl, soloIdentity
	defer func() { newControlPlane, loadIdentity = old, oldID }()
	ctx := context.Background()
	n, err := Start(ctx, soloConfig(nil, b.TempDir(), map[string]StateMachine{"count": &counter{}}))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close(ctx)
	if err := n.WaitSettled(ctx); err != nil {
		b.Fatal(err)
	}
	tok, err := n.Token(1)
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := n.Propose(ctx, tok, "count", nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// feedBench is a member's read side over a real ledger FSM, without the
// network: only what Node.refresh and the metrics sampler call.
type feedBench struct {
	backend // nil: nothing else is called
	nb      *netBackend
	self    string
}

func (f *feedBench) shardsSince(since uint64) (uint64, []ShardInfo, bool) {
	return f.nb.shardsSince(since)
}
func (f *feedBench) shards() []ShardInfo                          { return f.nb.shards() }
func (f *feedBench) shard(s uint32) (ShardInfo, bool)             { return f.nb.shard(s) }
func (f *feedBench) appliedIndex() uint64                         { return f.nb.appliedIndex() }
func (f *feedBench) acting(uint32, time.Time) (actingState, bool) { return actingState{}, false }

// token: the member acts on every shard the ledger grants it validly.
func (f *feedBench) token(s uint32, now time.Time) (uint64, time.Time, bool) {
	st := f.nb.fsm.State()
	r, ok := st.ValidOwner(s)
	if !ok || r.Owner != f.self {
		return 0, time.Time{}, false
	}
	return r.Epoch, now.Add(time.Second), true
}

// benchTable is a member's replica of a 100-node, 4,096-shard table for
// the per-commit benchmarks (docs/benchmarks.md, issue 24): every node
// registered, shard s granted to node s%100.
type benchTable struct {
	b      *testing.B
	fsm    *ledger.FSM
	idx    uint64
	epochs []uint64
	owners []int
}

const benchNodes, benchShards, benchSelf = 100, 4096, 50

func benchID(i int) string { return fmt.Sprintf("m%03d", i) }

func newBenchTable(b *testing.B) *benchTable {
	fsm, err := ledger.NewFSM(ledger.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	t := &benchTable{b: b, fsm: fsm, epochs: make([]uint64, benchShards), owners: make([]int, benchShards)}
	for i := range benchNodes {
		t.apply(ledger.Heartbeat{Node: benchID(i), Incarnation: 1, Now: 1})
	}
	for s := range benchShards {
		t.owners[s] = s % benchNodes
		t.apply(ledger.Grant{Shard: uint32(s), Owner: benchID(t.owners[s]), OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
		t.epochs[s] = 1
	}
	return t
}

func (t *benchTable) apply(c ledger.Command) {
	t.idx++
	if r := t.fsm.ApplyCommand(t.idx, c); r.Err != nil {
		t.b.Fatalf("%s: %v", ledger.FormatCommand(c), r.Err)
	}
}

// transfer commits the i-th commit of a run: a Transfer of one shard
// between two nodes other than benchSelf, so the member's own shards
// (and its acting set) stay as they are.
func (t *benchTable) transfer(i int) {
	s := (i * 7) % benchShards
	if t.owners[s] == benchSelf || (t.owners[s]+1)%benchNodes == benchSelf {
		s = (s + 1) % benchShards
	}
	from, to := t.owners[s], (t.owners[s]+1)%benchNodes
	t.apply(ledger.Transfer{Shard: uint32(s), Epoch: t.epochs[s], From: benchID(from), To: benchID(to), ToIncarnation: 1, ToLiveness: 1, Now: 3})
	t.epochs[s]++
	t.owners[s] = to
}

// BenchmarkMemberCommit measures a member's CPU per ownership commit with
// 4,096 shards over 100 nodes (docs/benchmarks.md, issue 24): the
// replica applies a Transfer of one shard between two other nodes, then
// Node.refresh diffs the table and the metrics sampler reads what changed.
// "full" is the read side before the change feed (refresh re-reads every
// shard on every commit, the sampler calls Shards); "feed" re-checks the
// shards the ledger's change feed names (refresh) and the sampler calls
// ShardsSince. Both include the apply; "apply" is the apply alone.
func BenchmarkMemberCommit(b *testing.B) {
	for _, mode := range []string{"apply", "full", "feed"} {
		b.Run(mode, func(b *testing.B) {
			t := newBenchTable(b)
			self := benchID(benchSelf)
			fb := &feedBench{nb: &netBackend{fsm: t.fsm}, self: self}
			n := &Node{cfg: Config{NodeID: self}, be: fb, log: slog.New(slog.DiscardHandler), changed: make(chan struct{}),
				view: map[uint32]shardView{}, elections: map[string]*Election{}, jobSeen: map[uint64]jobVersion{},
				active: map[uint32]int{}, handing: map[uint32]uint64{}}
			n.refresh(time.Now())
			gen, _, _ := n.ShardsSince(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				t.transfer(i)
				now := time.Now()
				switch mode {
				case "apply": // the replica's apply alone
					continue
				case "full":
					n.viewGen = 0 // as before the feed: every ownership change re-read the table
					n.refresh(now)
					_ = n.Shards()
					continue
				}
				n.refresh(now)
				g, recs, ok := n.ShardsSince(gen)
				if !ok || len(recs) == 0 {
					b.Fatalf("ShardsSince(%d) = %d shards, %v", gen, len(recs), ok)
				}
				gen = g
			}
		})
	}
}

// BenchmarkAgentCommit measures the agent's CPU per ownership commit on a
// member with 4,096 shards over 100 nodes (docs/benchmarks.md, issue 24):
// the replica applies a Transfer of one shard between two other nodes,
// then stepLatest's Observed input is built and the member's registered
// agent (acting on its 41 shards) steps it. "full" is the input before
// the change feed (every node and shard record: st.Nodes, st.Shards);
// "feed" is ownership.ObservedSince (every node record, the changed shard
// records). Both include the apply; "apply" is the apply alone.
func BenchmarkAgentCommit(b *testing.B) {
	for _, mode := range []string{"apply", "full", "feed"} {
		b.Run(mode, func(b *testing.B) {
			t := newBenchTable(b)
			self := benchID(benchSelf)
			a, err := ownership.NewAgent(ownership.DefaultConfig(), self, 1)
			if err != nil {
				b.Fatal(err)
			}
			// A synthetic clock: a microsecond a commit keeps the lease
			// (1.5 s) open for the whole run; heartbeats are asked every
			// RenewEvery and left unanswered (at most two in flight).
			now := time.Unix(1000, 0)
			rd := a.Step(now, ownership.Tick{})
			self1, _ := t.fsm.State().Node(self)
			a.Step(now, ownership.HeartbeatOutcome{Token: rd.Heartbeat.Token, Index: t.idx, Result: ledger.Result{Node: self1}})
			saw := t.fsm.State()
			a.Step(now, ownership.ObservedSince(nil, saw))
			if n := len(a.ActingShards(now)); n != benchShards/benchNodes+1 {
				b.Fatalf("the agent acts on %d shards, want %d", n, benchShards/benchNodes+1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				t.transfer(i)
				now = now.Add(time.Microsecond)
				st := t.fsm.State()
				var in ownership.Observed
				switch mode {
				case "apply":
					continue
				case "full":
					in = ownership.Observed{Applied: st.AppliedIndex(), Nodes: st.Nodes(), Shards: st.Shards(), Version: st.ActiveVersion()}
				default:
					in = ownership.ObservedSince(saw, st)
					if len(in.Shards) != 1 {
						b.Fatalf("ObservedSince: %d shard records, want 1", len(in.Shards))
					}
				}
				saw = st
				a.Step(now, in)
			}
		})
	}
}
