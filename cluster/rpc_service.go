package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
	"github.com/tenurehq/tenure/internal/mutation"
)

// The control RPC service ("Control.Apply", "Control.Status",
// "Control.Remove"); its wire types live in internal/rpcwire. Handlers never
// return Go errors for domain outcomes: those travel as a wire.ReplyCode so
// the caller can tell "certainly not submitted" (safe to retry) from
// "outcome unknown".

func removeErr(r wire.RemoveReply) error {
	switch r.Code {
	case wire.CodeOK:
		return nil
	case wire.CodeNotLeader:
		return ErrNotLeader
	case wire.CodeQuorumRisk:
		return fmt.Errorf("%w: %s", ErrQuorumRisk, r.Msg)
	case wire.CodeUnknownServer:
		return fmt.Errorf("%w: %s", ErrUnknownServer, r.Msg)
	case wire.CodeClosed:
		return fmt.Errorf("%w: %s", ErrNotLeader, r.Msg) // retry elsewhere
	case wire.CodeTimeout:
		return fmt.Errorf("%w: %s", ErrTimeout, r.Msg)
	case wire.CodeLeadershipLost:
		return fmt.Errorf("%w: %s", ErrLeadershipLost, r.Msg)
	case wire.CodeUnauthorized:
		return fmt.Errorf("%w: %s", ErrUnauthorized, r.Msg)
	}
	return fmt.Errorf("cluster: remote: %s", r.Msg)
}

func applyResult(r wire.ApplyReply, addr string) (Applied, error) {
	res := Applied{Index: r.Index, Response: r.Response}
	switch r.Code {
	case wire.CodeOK:
		return res, nil
	case wire.CodeFSMError:
		return Applied{Index: r.Index}, &FSMError{Index: r.Index, Err: errors.New(r.Msg)}
	case wire.CodeBadRequest:
		return Applied{}, fmt.Errorf("%w: %s", ErrBadRequest, r.Msg)
	case wire.CodeBadResponse:
		return Applied{Index: r.Index}, fmt.Errorf("%w: %s: %s", ErrBadResponse, addr, r.Msg)
	}
	if err := leaderReplyErr(r.Code, addr, r.Msg); err != nil {
		return Applied{}, err
	}
	// An error after submission (e.g. an unmarshalable response) — the
	// command was committed, but report it.
	return Applied{Index: r.Index}, fmt.Errorf("cluster: remote %s: %s", addr, r.Msg)
}

// leaderReplyErr is the error of the reply codes every call to the leader
// maps alike (Apply, Renew, ReadIndex): it moved or is closing
// (ErrNotLeader), lost leadership (ErrLeadershipLost), timed out
// (ErrTimeout) or refused the sender (ErrUnauthorized). nil for any other
// code: the caller maps it.
func leaderReplyErr(code wire.ReplyCode, addr, msg string) error {
	switch code {
	case wire.CodeNotLeader, wire.CodeClosed:
		return fmt.Errorf("%w: %s: %s", ErrNotLeader, addr, msg)
	case wire.CodeLeadershipLost:
		return fmt.Errorf("%w: %s: %s", ErrLeadershipLost, addr, msg)
	case wire.CodeTimeout:
		return fmt.Errorf("%w: %s: %s", ErrTimeout, addr, msg)
	case wire.CodeUnauthorized:
		return fmt.Errorf("%w: %s: %s", ErrUnauthorized, addr, msg)
	}
	return nil
}

// leaderCallErr is the error of a call to the leader at addr that got no
// reply (what names the call: "renewing with", "read index from"):
// ErrTimeout once ctx ended, otherwise ErrNotLeader (cctx, from
// whileLeader, ended: this node sees another leader or none; or the
// connection failed). A read or a renewal changes nothing, so either is
// safe to retry.
func leaderCallErr(ctx, cctx context.Context, what, addr string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %s %s: %w", ErrTimeout, what, addr, ctx.Err())
	case cctx.Err() != nil:
		return fmt.Errorf("%w: %s %s: %w", ErrNotLeader, what, addr, context.Cause(cctx))
	}
	return fmt.Errorf("%w: %s %s: %v", ErrNotLeader, what, addr, err)
}

// askLeader is the one way a call reaches the current leader (ReadIndex,
// Renew, Words, SendOwnerWord): ErrControlClosed while the group closes,
// ErrNoLeader while there is none, self true (nothing sent) when this node
// leads; else it calls method at the leader's address with args into
// reply, cut short as soon as this node sees another leader or none
// (whileLeader: a leader whose host vanished without a TCP reset would
// hold the call until ctx ends while a new leader already serves), a
// failed call mapped by leaderCallErr (what names the call). addr is the
// leader's address ("" when there is none).
func (g *ControlGroup) askLeader(ctx context.Context, method, what string, args, reply any) (addr string, self bool, err error) {
	if g.isClosing() {
		return "", false, ErrControlClosed
	}
	id, addr := g.Leader()
	switch {
	case addr == "":
		return "", false, ErrNoLeader
	case id == g.cfg.NodeID:
		return addr, true, nil
	}
	cctx, cancel := g.whileLeader(ctx, addr)
	defer cancel()
	if err := g.pool.call(cctx, addr, method, args, reply); err != nil {
		return addr, false, leaderCallErr(ctx, cctx, what, addr, err)
	}
	return addr, false, nil
}

func codeOf(err error) wire.ReplyCode {
	var fe *FSMError
	switch {
	case err == nil:
		return wire.CodeOK
	case errors.As(err, &fe):
		return wire.CodeFSMError
	case errors.Is(err, ErrNotLeader):
		return wire.CodeNotLeader
	case errors.Is(err, ErrLeadershipLost):
		return wire.CodeLeadershipLost
	case errors.Is(err, ErrTimeout):
		return wire.CodeTimeout
	case errors.Is(err, ErrControlClosed):
		return wire.CodeClosed
	case errors.Is(err, ErrQuorumRisk):
		return wire.CodeQuorumRisk
	case errors.Is(err, ErrUnknownServer):
		return wire.CodeUnknownServer
	case errors.Is(err, ErrBadRequest):
		return wire.CodeBadRequest
	case errors.Is(err, ErrBadResponse):
		return wire.CodeBadResponse
	case errors.Is(err, ErrUnauthorized):
		return wire.CodeUnauthorized
	}
	return wire.CodeError
}

// maxRPCTimeout caps a caller-supplied timeout.
const maxRPCTimeout = 5 * time.Minute

// controlRPC is the net/rpc receiver of one connection. Every method
// validates its input and never panics on it. peer is who the connection
// proved to be (when authenticated).
type controlRPC struct {
	g             *ControlGroup
	peer          Peer
	authenticated bool
}

// authorize checks a forwarded command against the proven peer, on the
// leader, once the leader's FSM has applied every entry committed when the
// request arrived: a member can only know of a grant that is committed, so
// the check sees every grant the sender may rightly claim. (The FSM's own
// applied index, waitFSMApplied: Raft's counts an entry once it handed it
// to the FSM, and under load the FSM lags behind that — Authorize would
// then judge a member's Release of a shard just granted against a ledger
// without the grant.) The wait is bounded by the request's timeout; a
// replica that has not caught up by then refuses the command unjudged
// (ErrTimeout, naming both indexes; nothing was proposed).
func (s *controlRPC) authorize(ctx context.Context, cmd []byte) error {
	g := s.g
	if !s.authenticated || g.cfg.Authorize == nil {
		return nil
	}
	commit := g.commitIndex()
	wait := g.waitFSMApplied
	if mutation.On(mutation.AuthorizeRaftApplied) {
		wait = g.waitApplied
	}
	if err := wait(ctx, commit); err != nil {
		return fmt.Errorf("command not judged (not proposed): this replica's FSM applied only up to index %d of the %d committed when it arrived: %w", g.fsmApplied(), commit, err)
	}
	if err := g.cfg.Authorize(s.peer, cmd); err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return nil
}

func (s *controlRPC) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	switch {
	case d <= 0:
		d = s.g.cfg.RPCTimeout
	case d > maxRPCTimeout:
		d = maxRPCTimeout
	}
	return context.WithTimeout(context.Background(), d)
}

// Apply applies a forwarded command if this node is the leader.
func (s *controlRPC) Apply(args *wire.ApplyArgs, reply *wire.ApplyReply) error {
	g := s.g
	if args == nil {
		reply.Code, reply.Msg = wire.CodeBadRequest, "nil args"
		return nil
	}
	if g.isClosing() {
		reply.Code, reply.Msg = wire.CodeClosed, "closing"
		return nil
	}
	if !g.isRaftLeader() {
		reply.Code, reply.Msg = wire.CodeNotLeader, "not leader"
		return nil
	}
	ctx, cancel := s.ctx(args.Timeout)
	defer cancel()
	if err := s.authorize(ctx, args.Cmd); err != nil {
		reply.Code, reply.Msg = codeOf(err), err.Error()
		if reply.Code == wire.CodeUnauthorized {
			g.log.Warn("cluster: refused a forwarded command", "peer", s.peer.String(), "err", err)
		}
		return nil
	}
	res, err := g.applyLocal(ctx, args.Cmd)
	reply.Index, reply.Response = res.Index, res.Response
	reply.Code = codeOf(err)
	if err != nil {
		var fe *FSMError
		if errors.As(err, &fe) {
			reply.Msg = fe.Err.Error()
		} else {
			reply.Msg = err.Error()
		}
	}
	return nil
}

// Status reports this node's Raft state.
func (s *controlRPC) Status(_ *wire.StatusArgs, reply *wire.StatusReply) error {
	*reply = s.g.status()
	return nil
}

// Remove removes a server (leave or operator action) if this node is the
// leader.
func (s *controlRPC) Remove(args *wire.RemoveArgs, reply *wire.RemoveReply) error {
	g := s.g
	if args == nil || ValidateNodeID(args.ID) != nil {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad server id"
		return nil
	}
	if s.authenticated && !s.peer.IsOperator() && args.ID != s.peer.ID {
		reply.Code = wire.CodeUnauthorized
		reply.Msg = fmt.Sprintf("%s may remove only itself, not %q (removing another server needs an operator certificate)", s.peer, args.ID)
		g.log.Warn("cluster: refused a removal", "peer", s.peer.String(), "server", args.ID)
		return nil
	}
	if !g.isRaftLeader() {
		reply.Code, reply.Msg = wire.CodeNotLeader, "not leader"
		return nil
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	err := g.removeServer(ctx, *args)
	reply.Code = codeOf(err)
	if err != nil {
		reply.Msg = err.Error()
	}
	return nil
}

// waitApplied waits until Raft has applied index (or ctx ends). Raft
// counts an entry applied once it handed it to the FSM, which may not have
// applied it yet; waitFSMApplied waits for the FSM itself.
func (g *ControlGroup) waitApplied(ctx context.Context, index uint64) error {
	return g.waitIndex(ctx, g.appliedIndex, index)
}

// waitFSMApplied waits until the FSM itself has applied what Raft
// committed up to commit: its last command at or below commit
// (fsmWaitIndex: an entry the FSM never sees — a new leader's no-op, a
// Barrier — would keep it waiting for the next command), by fsmApplied.
func (g *ControlGroup) waitFSMApplied(ctx context.Context, commit uint64) error {
	if g.cfg.AppliedIndex == nil {
		return g.waitApplied(ctx, commit)
	}
	return g.waitIndex(ctx, g.fsmApplied, fsmWaitIndex(g.cfg.LogStore, commit))
}

// fsmWaitIndex is the index the FSM must have applied to have applied
// everything committed up to commit: the last command at or below commit;
// 0 when the log holds none from commit down to its start (a cluster that
// has committed no command yet; entries compacted away were in a snapshot
// this FSM took or restored, so it applied them). It reads back at most
// renewScan entries; when that finds no command, or a read fails, it
// answers commit, the conservative index (lastCommand).
func fsmWaitIndex(store raft.LogStore, commit uint64) uint64 {
	i, found, atStart := lastCommand(store, commit)
	switch {
	case found:
		return i
	case atStart:
		return 0
	}
	return commit
}

// fsmApplied is the last index the FSM applied: ControlConfig.AppliedIndex,
// the FSM's own count, when set; otherwise Raft's applied index.
func (g *ControlGroup) fsmApplied() uint64 {
	if g.cfg.AppliedIndex != nil {
		return g.cfg.AppliedIndex()
	}
	return g.appliedIndex()
}

// waitIndex waits until applied() reaches index (or ctx ends, or the group
// closes).
func (g *ControlGroup) waitIndex(ctx context.Context, applied func() uint64, index uint64) error {
	if applied() >= index {
		return nil
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for applied() < index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting to apply index %d: %w", ErrTimeout, index, ctx.Err())
		case <-g.closing:
			return ErrControlClosed
		case <-t.C:
		}
	}
	return nil
}

// statusOf asks the node at addr for its Raft state (Control.Status),
// waiting at most RPCTimeout within ctx.
func (g *ControlGroup) statusOf(ctx context.Context, addr string) (wire.StatusReply, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.RPCTimeout)
	defer cancel()
	var st wire.StatusReply
	err := g.pool.call(ctx, addr, "Control.Status", &wire.StatusArgs{}, &st)
	return st, err
}

func (g *ControlGroup) status() wire.StatusReply {
	_, leader := g.leaderWithID()
	return wire.StatusReply{
		Leader:       string(leader),
		ID:           g.cfg.NodeID,
		Addr:         g.addr,
		HasState:     g.raftLastIndex() > 0,
		LastIndex:    g.raftLastIndex(),
		AppliedIndex: g.appliedIndex(),
		Term:         g.currentTerm(),
		Bootstrap:    g.bootstrapChoice(),
	}
}
