package cluster

// Submitting commands: Apply and RemoveServer on the leader or forwarded to
// it over RPC, Barrier, the mapping of Raft's errors onto this package's,
// and the leader-change watch that cuts a forwarded call short.

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
	"github.com/tenurehq/tenure/cluster/rpc"
)

// leaderWatchLoop turns Raft's leader observations into closes of
// leaderChange. The observer never blocks Raft: an observation dropped on
// a full channel only delays a forwarded command's cancellation to its
// own deadline.
func (g *ControlGroup) leaderWatchLoop(r *raft.Raft, observer *raft.Observer, obs <-chan raft.Observation, stop <-chan struct{}) {
	defer r.DeregisterObserver(observer)
	for {
		select {
		case <-obs:
			g.reportTerm()
			g.leaderMu.Lock()
			close(g.leaderChange)
			g.leaderChange = make(chan struct{})
			g.leaderMu.Unlock()
		case <-stop:
			return
		case <-g.closing:
			return
		}
	}
}

// reportTerm reports the Raft term and whether this node leads, as
// go-metrics gauges (httpapi.BridgeGoMetrics exports them as
// tenure_control_term and tenure_control_leader).
func (g *ControlGroup) reportTerm() {
	gometrics.SetGauge([]string{"control", "term"}, float32(g.currentTerm()))
	leader := float32(0)
	if g.isRaftLeader() {
		leader = 1
	}
	gometrics.SetGauge([]string{"control", "leader"}, leader)
}

// leaderChanged returns a channel closed at the next leader change.
func (g *ControlGroup) leaderChanged() <-chan struct{} {
	g.leaderMu.Lock()
	defer g.leaderMu.Unlock()
	return g.leaderChange
}

// whileLeader returns a context that ends with ctx or as soon as this
// node sees a leader other than addr (or none). A command forwarded to a
// leader that died without closing its connections (a host gone, no TCP
// reset) would otherwise wait for its whole deadline — or forever without
// one — while a new leader is already serving.
func (g *ControlGroup) whileLeader(ctx context.Context, addr string) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			ch := g.leaderChanged()
			if _, cur := g.Leader(); cur != addr {
				cancel(fmt.Errorf("leader changed from %s to %q", addr, cur))
				return
			}
			select {
			case <-ch:
			case <-wctx.Done():
				return
			case <-g.closing:
				return
			}
		}
	}()
	return wctx, func() { cancel(nil) }
}

// Barrier waits until every entry committed before the call is applied to
// the local FSM. Leader only (ErrNotLeader otherwise).
func (g *ControlGroup) Barrier(ctx context.Context) error {
	r := g.rft()
	if r == nil {
		return ErrNotLeader
	}
	f := r.Barrier(timeoutFrom(ctx))
	if err := g.waitCtx(ctx, f); err != nil {
		return g.mapRaftErr(err)
	}
	return nil
}

// timeoutFrom converts ctx's deadline into a raft timeout (0 = none).
func timeoutFrom(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			return time.Nanosecond
		}
		return d
	}
	return 0
}

func (g *ControlGroup) mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrControlClosed, err)
	}
	return err
}

// applyStopped is why an Apply retry loop must stop, nil while it may go
// on: the group closed (ErrControlClosed), or ctx ended (ErrNoLeader
// wrapping ctx's error and, if any, the last attempt's).
func (g *ControlGroup) applyStopped(ctx context.Context, lastErr error) error {
	if g.isClosing() {
		return ErrControlClosed
	}
	if err := ctx.Err(); err != nil {
		if lastErr != nil {
			return fmt.Errorf("%w: %w (last: %v)", ErrNoLeader, err, lastErr)
		}
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	return nil
}

// Apply commits cmd through Raft and returns its index and the FSM's
// marshalled response. On a follower the command is forwarded over RPC to the
// leader. It retries only where the command certainly was not submitted (no
// leader yet, the peer was not leader, the connection could not be opened);
// ErrLeadershipLost and ErrTimeout mean the outcome is unknown and are
// returned, never retried. An FSM error response comes back as *FSMError.
// Give ctx a deadline: without one, Apply waits for a leader until Close.
func (g *ControlGroup) Apply(ctx context.Context, cmd []byte) (Applied, error) {
	backoff := 5 * time.Millisecond
	var lastErr error
	for {
		if err := g.applyStopped(ctx, lastErr); err != nil {
			return Applied{}, err
		}
		var (
			res Applied
			err error
		)
		if g.isRaftLeader() {
			g.leaderSeen.Store(true)
			res, err = g.applyLocal(ctx, cmd)
		} else if _, addr := g.Leader(); addr != "" && addr != g.addr {
			g.leaderSeen.Store(true)
			res, err = g.applyRemote(ctx, addr, cmd)
		} else if !g.leaderSeen.Load() {
			res, err = g.applyViaVoters(ctx, cmd)
		} else {
			err = ErrNoLeader
		}
		if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || rpc.IsDialError(err)) {
			return res, err
		}
		lastErr = err
		_ = g.pause(ctx, backoff) // the next round's applyStopped says why it ended
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// applyViaVoters is Apply's first try on a node that has not heard from a
// leader since it started (a restart: its Raft knows the configuration but
// learns the leader only from the leader's next AppendEntries, which raft's
// heartbeat backoff for a peer that was down can delay by up to
// HeartbeatTimeout/2). It forwards cmd to the voters of the latest
// configuration in turn, as ApplyViaPeers does: a voter that is not the
// leader answers ErrNotLeader without proposing anything. ErrNoLeader when
// none took it. Once a leader is known, Apply forwards to it alone, so a
// leaderless cluster later (an election) is never sprayed with forwards.
func (g *ControlGroup) applyViaVoters(ctx context.Context, cmd []byte) (Applied, error) {
	voters := g.voterAddrs()
	var addrs []string
	for _, id := range slices.Sorted(maps.Keys(voters)) {
		if addr := voters[id]; addr != g.addr && id != g.cfg.NodeID {
			addrs = append(addrs, addr)
		}
	}
	if res, taken, err := g.offerInTurn(ctx, addrs, cmd); taken {
		return res, err
	}
	return Applied{}, ErrNoLeader
}

// offerInTurn forwards cmd to the peers at addrs in turn until one answers
// with anything but ErrNotLeader or a dial error (taken: its result), or ctx
// ends; otherwise it returns the last of those errors, taken false. A peer
// that is not the leader proposes nothing, so the next can be tried.
func (g *ControlGroup) offerInTurn(ctx context.Context, addrs []string, cmd []byte) (Applied, bool, error) {
	var lastErr error
	for _, addr := range addrs {
		res, err := g.applyToPeer(ctx, addr, cmd)
		if err == nil || !(errors.Is(err, ErrNotLeader) || rpc.IsDialError(err)) {
			return res, true, err
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return Applied{}, false, lastErr
}

func (g *ControlGroup) applyLocal(ctx context.Context, cmd []byte) (Applied, error) {
	if g.cfg.CheckCommand != nil {
		if err := g.cfg.CheckCommand(cmd); err != nil {
			return Applied{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	r := g.rft()
	if r == nil {
		return Applied{}, ErrNotLeader
	}
	f := r.Apply(cmd, timeoutFrom(ctx))
	if err := g.waitCtx(ctx, f); err != nil {
		return Applied{}, g.mapRaftErr(err)
	}
	res := Applied{Index: f.Index()}
	b, err := marshalResponse(f.Response())
	if err != nil {
		var fe *FSMError
		if errors.As(err, &fe) {
			fe.Index = res.Index
		}
		return res, err
	}
	res.Response = b
	return res, nil
}

// marshalResponse turns an FSM response into bytes (see ControlConfig.FSM).
func marshalResponse(resp any) ([]byte, error) {
	switch v := resp.(type) {
	case nil:
		return nil, nil
	case []byte:
		return v, nil
	case error:
		return nil, &FSMError{Err: v}
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("%w: marshal %T: %v", ErrBadResponse, resp, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrBadResponse, resp)
}

func (g *ControlGroup) applyRemote(ctx context.Context, addr string, cmd []byte) (Applied, error) {
	args := wire.ApplyArgs{Cmd: cmd, Timeout: timeoutFrom(ctx)}
	var reply wire.ApplyReply
	cctx, cancel := g.whileLeader(ctx, addr)
	defer cancel()
	err := g.pool.call(cctx, addr, "Control.Apply", &args, &reply)
	switch {
	case err == nil:
	case rpc.IsDialError(err):
		return Applied{}, err // never sent: Apply retries (with the new leader)
	case ctx.Err() != nil:
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %w", ErrTimeout, addr, ctx.Err())
	case cctx.Err() != nil:
		// The request may have reached the old leader: outcome unknown.
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %w", ErrLeadershipLost, addr, context.Cause(cctx))
	default:
		return Applied{}, fmt.Errorf("%w: forwarding to %s: %v", ErrLeadershipLost, addr, err)
	}
	return applyResult(reply, addr)
}

// RemoveServer removes id from the Raft configuration (operator action, run
// on the leader; forwarded if needed; retried across leader changes until
// ctx ends). If id is a voter, a caught-up healthy
// non-voter is promoted first; without one, the removal is refused with
// ErrQuorumRisk when it would leave fewer voters than a quorum of MaxVoters.
// The node is not re-added while it keeps its current incarnation.
func (g *ControlGroup) RemoveServer(ctx context.Context, id string) error {
	return g.forwardRemove(ctx, wire.RemoveArgs{ID: id}, 0)
}

// forwardRemove runs a removal on the leader, wherever it is. Removal is
// idempotent, so unlike Apply it is retried after an unknown outcome (a
// leadership change mid-way); an "unknown server" after such a retry means
// the first attempt succeeded.
//
// leaderless > 0 gives up once no leader has been reachable for that long
// (a node leaving while the whole cluster stops), with an error that
// wraps errNobodyLeft and ErrNoLeader; 0 waits for ctx.
func (g *ControlGroup) forwardRemove(ctx context.Context, args wire.RemoveArgs, leaderless time.Duration) error {
	backoff := 5 * time.Millisecond
	uncertain := false
	var noLeaderSince time.Time
	for {
		var err error
		if g.isRaftLeader() {
			err = g.removeServer(ctx, args)
		} else if _, addr := g.Leader(); addr != "" && addr != g.addr {
			var reply wire.RemoveReply
			err = g.pool.call(ctx, addr, "Control.Remove", &args, &reply)
			switch {
			case err == nil:
				err = removeErr(reply)
			case !rpc.IsDialError(err) && ctx.Err() == nil:
				err = fmt.Errorf("%w: remove via %s: %v", ErrLeadershipLost, addr, err)
			}
		} else {
			err = ErrNoLeader
		}
		if uncertain && errors.Is(err, ErrUnknownServer) {
			return nil
		}
		if (errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrTimeout)) && ctx.Err() == nil {
			uncertain = true
		} else if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || rpc.IsDialError(err)) {
			return err
		}
		if errors.Is(err, ErrNoLeader) || rpc.IsDialError(err) {
			if noLeaderSince.IsZero() {
				noLeaderSince = time.Now()
			} else if leaderless > 0 && time.Since(noLeaderSince) >= leaderless {
				return fmt.Errorf("%w: %w: remove %s: no leader reachable for %v (last: %v)", errNobodyLeft, ErrNoLeader, args.ID, leaderless, err)
			}
		} else {
			noLeaderSince = time.Time{}
		}
		switch perr := g.pause(ctx, backoff); {
		case errors.Is(perr, ErrControlClosed):
			return ErrControlClosed
		case perr != nil && uncertain:
			return fmt.Errorf("%w: remove %s: %w (last: %v)", ErrTimeout, args.ID, perr, err)
		case perr != nil:
			return fmt.Errorf("%w: remove %s: %w (last: %v)", ErrNoLeader, args.ID, perr, err)
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// pause waits d between two tries of a retry loop: it returns nil once d
// passed, ctx's error if ctx ended first, ErrControlClosed if the group
// closed first.
func (g *ControlGroup) pause(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d): // collected once unreferenced (Go ≥ 1.23)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closing:
		return ErrControlClosed
	}
}
