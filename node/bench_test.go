package node

import (
	"context"
	"testing"
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
