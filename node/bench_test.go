package node

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
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
			const nodes, shards = 100, 4096
			fsm, err := ledger.NewFSM(ledger.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			idx := uint64(0)
			apply := func(c ledger.Command) {
				idx++
				if r := fsm.ApplyCommand(idx, c); r.Err != nil {
					b.Fatalf("%s: %v", ledger.FormatCommand(c), r.Err)
				}
			}
			id := func(i int) string { return fmt.Sprintf("m%03d", i) }
			for i := range nodes {
				apply(ledger.Heartbeat{Node: id(i), Incarnation: 1, Now: 1})
			}
			epochs := make([]uint64, shards)
			owners := make([]int, shards)
			for s := range shards {
				owners[s] = s % nodes
				apply(ledger.Grant{Shard: uint32(s), Owner: id(owners[s]), OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
				epochs[s] = 1
			}
			self := id(50)
			fb := &feedBench{nb: &netBackend{fsm: fsm}, self: self}
			n := &Node{cfg: Config{NodeID: self}, be: fb, log: slog.New(slog.DiscardHandler), changed: make(chan struct{}),
				view: map[uint32]shardView{}, elections: map[string]*Election{}, jobSeen: map[uint64]jobVersion{},
				active: map[uint32]int{}, handing: map[uint32]uint64{}}
			n.refresh(time.Now())
			gen, _, _ := n.ShardsSince(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := (i * 7) % shards
				if owners[s] == 50 || (owners[s]+1)%nodes == 50 {
					s = (s + 1) % shards // keep the member's own shards: its acting set stays as it is
				}
				from, to := owners[s], (owners[s]+1)%nodes
				apply(ledger.Transfer{Shard: uint32(s), Epoch: epochs[s], From: id(from), To: id(to), ToIncarnation: 1, ToLiveness: 1, Now: 3})
				epochs[s]++
				owners[s] = to
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
