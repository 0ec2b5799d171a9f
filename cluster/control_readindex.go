package cluster

// Read barriers (ReadIndex, the Raft dissertation §6.4): a node that must
// answer a read linearizably asks the leader for an index; the leader reads
// its last log index after it received the request, confirms with a quorum
// of voters that it still leads its term (ConfirmLeadership), and answers
// the index. Once the asking node's replica has applied that index, its
// state contains every write acknowledged before the request was sent.
// Control.ReadIndex is an RPC of cluster version 5: nodes call it only once
// the cluster runs it (an older leader does not know the method).

import (
	"context"
	"fmt"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// ReadIndex returns the index a replica must have applied before a read
// from it reflects every write committed before the call: the current
// leader's last log index, read after it received the request and then
// confirmed by a quorum round. Errors (ErrNoLeader, ErrNotLeader,
// ErrTimeout, ErrLeadershipLost, ErrUnauthorized) mean no barrier: retry.
func (g *ControlGroup) ReadIndex(ctx context.Context) (uint64, error) {
	var reply wire.ReadIndexReply
	addr, self, err := g.askLeader(ctx, "Control.ReadIndex", "read index from", &wire.ReadIndexArgs{Timeout: timeoutFrom(ctx)}, &reply)
	switch {
	case self:
		return g.readIndexLocal(ctx)
	case err != nil:
		return 0, err
	}
	if reply.Code == wire.CodeOK {
		return reply.Index, nil
	}
	if err := leaderReplyErr(reply.Code, addr, reply.Msg); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("cluster: read index from %s: %s", addr, reply.Msg)
}

// readIndexLocal is the leader's side of ReadIndex. The index is read
// before the confirm round, so a write acknowledged before the request
// arrived is at or below it; a successful round proves this node still led
// its term after the read. renewIndex skips entries the FSM never sees
// (no-ops, barriers, configuration changes): they change nothing a read
// observes.
func (g *ControlGroup) readIndexLocal(ctx context.Context) (uint64, error) {
	if !g.isRaftLeader() {
		return 0, ErrNotLeader
	}
	idx := g.renewIndex()
	if err := g.ConfirmLeadership(ctx); err != nil {
		return 0, err
	}
	return idx, nil
}

// ReadIndex is a node's request for a read barrier (see
// ControlGroup.ReadIndex). Any authenticated cluster member may ask: the
// answer is a log index.
func (s *controlRPC) ReadIndex(args *wire.ReadIndexArgs, reply *wire.ReadIndexReply) error {
	g := s.g
	if args == nil || args.Timeout < 0 {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad read-index request"
		return nil
	}
	if g.isClosing() {
		reply.Code, reply.Msg = wire.CodeClosed, "closing"
		return nil
	}
	ctx, cancel := s.ctx(args.Timeout)
	defer cancel()
	idx, err := g.readIndexLocal(ctx)
	if err != nil {
		reply.Code, reply.Msg = codeOf(err), err.Error()
		return nil
	}
	reply.Index = idx
	return nil
}
