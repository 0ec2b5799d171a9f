package cluster

// Lease renewals off the Raft log (docs/protocol.md, "Renewals off the
// log"): a member asks the leader (Control.Renew); the leader reads its last
// log index, lets the planner accept the renewal (ControlConfig.Renew) and
// acknowledges it only after a confirm round (ConfirmLeadership).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// ErrRenewUnsupported: the leader does not offer renewals (ControlConfig.Renew
// unset, an older binary, or renewals not active). Not a refusal of the
// node: the renewal failed; fall back or retry later.
var ErrRenewUnsupported = errors.New("cluster: leader does not offer lease renewals")

// ErrRenewNotReady is what ControlConfig.Renew returns while this node
// leads Raft but has not established its term (the Barrier, the voters'
// bound): the renewal can be judged once it has (ControlConfig.RenewReady).
// It matches ErrNotLeader, as the caller sees it.
var ErrRenewNotReady = fmt.Errorf("%w: the term is not established yet", ErrNotLeader)

// RenewRequest is one member's renewal of its own lease.
type RenewRequest struct {
	Node        string
	Incarnation uint64
	Liveness    uint64
}

// RenewResult is an acknowledged (or refused) renewal.
type RenewResult struct {
	// CommitIndex is the leader's last log index read after it received the
	// renewal: the member extends its lease only once it applied it.
	CommitIndex uint64
	// Record is what ControlConfig.Renew returned on the leader (also with a
	// refusal).
	Record []byte
}

// Renew renews req.Node's lease with the current leader (this node itself
// if it leads). nil means a leader accepted it after receiving it and then
// confirmed its leadership with a quorum round. A refusal named in
// ControlConfig.RenewRefusals comes back as that error (errors.Is) with the
// leader's record; other errors (ErrNoLeader, ErrNotLeader, ErrTimeout,
// ErrLeadershipLost, ErrRenewUnsupported, ErrUnauthorized) mean the renewal
// failed.
func (g *ControlGroup) Renew(ctx context.Context, req RenewRequest) (RenewResult, error) {
	args := wire.RenewArgs{Node: req.Node, Incarnation: req.Incarnation, Liveness: req.Liveness, Timeout: timeoutFrom(ctx)}
	var reply wire.RenewReply
	start := time.Now()
	addr, self, err := g.askLeader(ctx, "Control.Renew", "renewing with", &args, &reply)
	switch {
	case self:
		return g.renewLocal(ctx, req)
	case err != nil:
		if addr != "" { // the call to the leader failed
			g.log.Debug("cluster: renewal failed", "leader", addr, "after", time.Since(start), "err", err)
		}
		return RenewResult{}, err
	}
	res := RenewResult{CommitIndex: reply.CommitIndex, Record: reply.Record}
	switch reply.Code {
	case wire.CodeOK:
		return res, nil
	case wire.CodeRefused:
		if sentinel, ok := g.cfg.RenewRefusals[reply.Refusal]; ok {
			return RenewResult{Record: reply.Record}, fmt.Errorf("%w (leader %s: %s)", sentinel, addr, reply.Msg)
		}
		return RenewResult{}, fmt.Errorf("cluster: leader %s refused the renewal (%q): %s", addr, reply.Refusal, reply.Msg)
	case wire.CodeUnsupported:
		return RenewResult{}, fmt.Errorf("%w: %s: %s", ErrRenewUnsupported, addr, reply.Msg)
	case wire.CodeBadRequest:
		return RenewResult{}, fmt.Errorf("%w: %s", ErrBadRequest, reply.Msg)
	}
	if err := leaderReplyErr(reply.Code, addr, reply.Msg); err != nil {
		return RenewResult{}, err
	}
	return RenewResult{}, fmt.Errorf("cluster: renewing with %s: %s", addr, reply.Msg)
}

// renewLocal is the leader's side of a renewal.
func (g *ControlGroup) renewLocal(ctx context.Context, req RenewRequest) (RenewResult, error) {
	if g.cfg.Renew == nil {
		return RenewResult{}, ErrRenewUnsupported
	}
	var commit uint64
	var rec []byte
	for {
		// Taken before the leadership check: a change between the two
		// still ends the hold below.
		changed := g.leaderChanged()
		if !g.isRaftLeader() {
			return RenewResult{}, ErrNotLeader
		}
		var ready <-chan struct{}
		if g.cfg.RenewReady != nil {
			ready = g.cfg.RenewReady() // before the judgement: no wake-up is missed
		}
		commit = g.renewIndex()
		var err error
		rec, err = g.cfg.Renew(time.Now(), req)
		if err == nil {
			break
		}
		if ready == nil || !errors.Is(err, ErrRenewNotReady) {
			return RenewResult{Record: rec}, err
		}
		if !renewWait(ctx, ready, changed, g.closing) {
			return RenewResult{Record: rec}, err
		}
	}
	if err := g.ConfirmLeadership(ctx); err != nil {
		return RenewResult{}, err
	}
	return RenewResult{CommitIndex: commit, Record: rec}, nil
}

// renewWait holds a renewal the leader could not judge yet (its term not
// established): true when it may be judged again (ready closed), false
// when the leader changed, ctx ended or the group is closing.
func renewWait(ctx context.Context, ready, changed, closing <-chan struct{}) bool {
	select {
	case <-ready:
		return true
	case <-changed:
	case <-ctx.Done():
	case <-closing:
	}
	return false
}

// refusalName is the RenewRefusals name err matches, "" if none.
func (g *ControlGroup) refusalName(err error) string {
	for name, sentinel := range g.cfg.RenewRefusals {
		if errors.Is(err, sentinel) {
			return name
		}
	}
	return ""
}

// Renew is a member's renewal of its own lease (see ControlGroup.Renew).
func (s *controlRPC) Renew(args *wire.RenewArgs, reply *wire.RenewReply) error {
	g := s.g
	if args == nil || ValidateNodeID(args.Node) != nil {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad renewal request"
		return nil
	}
	if s.authenticated && (s.peer.IsOperator() || s.peer.ID != args.Node) {
		reply.Code = wire.CodeUnauthorized
		reply.Msg = fmt.Sprintf("%s may renew only its own lease, not %q's", s.peer, args.Node)
		g.log.Warn("cluster: refused a renewal", "peer", s.peer.String(), "node", args.Node)
		return nil
	}
	if g.isClosing() {
		reply.Code, reply.Msg = wire.CodeClosed, "closing"
		return nil
	}
	if g.cfg.Renew == nil {
		reply.Code, reply.Msg = wire.CodeUnsupported, "renewals not offered"
		return nil
	}
	ctx, cancel := s.ctx(args.Timeout)
	defer cancel()
	res, err := g.renewLocal(ctx, RenewRequest{Node: args.Node, Incarnation: args.Incarnation, Liveness: args.Liveness})
	reply.CommitIndex, reply.Record = res.CommitIndex, res.Record
	if err == nil {
		return nil
	}
	reply.Msg = err.Error()
	if name := g.refusalName(err); name != "" {
		reply.Code, reply.Refusal = wire.CodeRefused, name
		return nil
	}
	if errors.Is(err, ErrRenewUnsupported) {
		reply.Code = wire.CodeUnsupported
		return nil
	}
	reply.Code = codeOf(err)
	return nil
}

// renewIndex is the commit index a renewal ack carries: the last command
// in the leader's log (an entry the FSM applies), read after receipt.
// Entries the FSM never sees — a new leader's no-op, a Barrier, a
// configuration change — are skipped: a node waiting for its replica to
// apply such an index would wait for the next command, and its lease would
// lapse in an idle cluster. Skipping them loses nothing: they change no
// state the node reads. It reads back at most renewScan entries; when it
// finds no command there (or cannot read the log) it answers LastIndex, the
// conservative index.
func (g *ControlGroup) renewIndex() uint64 {
	return lastCommandIndex(g.cfg.LogStore, g.raftLastIndex())
}

// lastCommandIndex is renewIndex's read-back of store from last: the
// last command, else last.
func lastCommandIndex(store raft.LogStore, last uint64) uint64 {
	if i, found, _ := lastCommand(store, last); found {
		return i
	}
	return last
}

// lastCommand reads store back from last, at most renewScan entries, for
// the last command: its index and found; else atStart tells whether the
// read-back reached the log's start (index 0, or an entry no longer held:
// compacted into a snapshot) rather than the bound or a read error. The
// one read-back of renewIndex (lastCommandIndex) and of the leader's waits
// for its FSM (fsmWaitIndex).
func lastCommand(store raft.LogStore, last uint64) (index uint64, found, atStart bool) {
	for i := last; ; i-- {
		if i == 0 {
			return 0, false, true
		}
		if last-i >= renewScan {
			return 0, false, false
		}
		// A fresh Log for every entry: a raft.LogCache hands out its cached
		// entry's Data slice, and raft-boltdb decodes the next entry into
		// the slice it is given, so reusing one Log wrote an older entry's
		// bytes over the cached one that replication sends to followers
		// (a data race under -race; TestLastCommandIndexLeavesCacheAlone).
		var l raft.Log
		err := store.GetLog(i, &l)
		switch {
		case errors.Is(err, raft.ErrLogNotFound):
			return 0, false, true
		case err != nil:
			return 0, false, false
		case l.Type == raft.LogCommand:
			return i, true, false
		}
	}
}

// renewScan bounds lastCommand's read-back.
const renewScan = 64
