package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
	"github.com/tenurehq/tenure/cluster/rpc"
)

// SetIncarnation records the process incarnation once it is known later
// than NewControlGroup (a disk-less member learns it from the control
// group: ApplyViaPeers). A graceful Shutdown leaves under it.
func (g *ControlGroup) SetIncarnation(inc uint64) { g.inc.Store(inc) }

// ApplyViaPeers is Apply for a node the leader may not know yet — one that
// is not in the Raft configuration, such as a disk-less member asking for
// its incarnation before it is added as a non-voter. While this node knows
// no leader it offers cmd to the peers gossip lists, in the order a leader
// is likeliest among them (voter preference "always" first, then "auto",
// "never" last; by id within each), as a forwarded command: a peer that is
// not the leader answers ErrNotLeader without proposing anything, so the
// next is tried. Once Raft names a leader it is Apply. Errors are Apply's
// (ErrLeadershipLost and ErrTimeout: outcome unknown).
func (g *ControlGroup) ApplyViaPeers(ctx context.Context, cmd []byte) (Applied, error) {
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		if err := g.applyStopped(ctx, lastErr); err != nil {
			return Applied{}, err
		}
		if _, addr := g.Leader(); addr != "" {
			return g.Apply(ctx, cmd)
		}
		res, taken, err := g.offerInTurn(ctx, g.leaderCandidates(), cmd)
		if taken {
			return res, err
		}
		if err != nil {
			lastErr = err
		}
		_ = g.pause(ctx, backoff) // the next round's applyStopped says why it ended
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// applyToPeer forwards cmd to the peer at addr as applyRemote does, but
// without watching this node's idea of the leader (it has none yet): ctx
// alone bounds the call.
func (g *ControlGroup) applyToPeer(ctx context.Context, addr string, cmd []byte) (Applied, error) {
	args := wire.ApplyArgs{Cmd: cmd, Timeout: timeoutFrom(ctx)}
	var reply wire.ApplyReply
	err := g.pool.call(ctx, addr, "Control.Apply", &args, &reply)
	switch {
	case err == nil:
	case rpc.IsDialError(err):
		return Applied{}, err // never sent: try the next peer
	case ctx.Err() != nil:
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %w", ErrTimeout, addr, ctx.Err())
	default:
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %v", ErrLeadershipLost, addr, err)
	}
	return applyResult(reply, addr)
}

// leaderCandidates returns the Raft addresses of the alive peers gossip
// lists, the likeliest leaders first (see ApplyViaPeers).
func (g *ControlGroup) leaderCandidates() []string {
	if g.peers == nil {
		return nil
	}
	var ms []Member
	for _, m := range g.peers.Members() {
		if m.State == StateAlive && m.RaftAddr != "" && m.RaftAddr != g.addr && m.ID != g.cfg.NodeID {
			ms = append(ms, m)
		}
	}
	rank := func(m Member) int {
		switch VoterPreferenceOf(m.Meta) {
		case VoterAlways:
			return 0
		case VoterNever:
			return 2
		}
		return 1
	}
	slices.SortFunc(ms, func(a, b Member) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.ID, b.ID))
	})
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.RaftAddr)
	}
	return out
}
