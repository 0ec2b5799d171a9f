package cluster

// Words: the handoff on the old owner's word (cluster version 6,
// ownership/word.go). The old owner tells the leader its word — its
// Transfers — over this port with Control.OwnerWord, where the sender's
// certificate is proven (ControlConfig.OwnerWord), at once and beside the
// Transfer's commit (which may wait behind the sender's in-flight entry);
// the target asks the leader for the words relayed to it with
// Control.Words, a long poll the leader answers as soon as it holds one
// (ControlConfig.Words).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
	"github.com/tenurehq/tenure/internal/mutation"
)

// ErrWordsUnsupported: the leader does not offer words (ControlConfig.Words
// unset, an older binary, or not active now).
var ErrWordsUnsupported = errors.New("cluster: leader does not offer words")

// Words asks the current leader (this node itself if it leads) for the
// words relayed to node, waiting up to the leader's hold; the bytes are
// what ControlConfig.Words returned there.
func (g *ControlGroup) Words(ctx context.Context, node string) ([]byte, error) {
	var reply wire.WordsReply
	addr, self, err := g.askLeader(ctx, "Control.Words", "asking for words", &wire.WordsArgs{Node: node, Timeout: timeoutFrom(ctx)}, &reply)
	switch {
	case self:
		return g.wordsLocal(ctx, node)
	case err != nil:
		return nil, err
	}
	if err := wordsReplyErr(reply.Code, "asking for words", addr, reply.Msg); err != nil {
		return nil, err
	}
	return reply.Data, nil
}

// wordsLocal is the leader's side of an ask for words.
func (g *ControlGroup) wordsLocal(ctx context.Context, node string) ([]byte, error) {
	if g.cfg.Words == nil {
		return nil, ErrWordsUnsupported
	}
	if !g.isRaftLeader() {
		return nil, ErrNotLeader
	}
	data, err := g.cfg.Words(ctx, node)
	if err != nil {
		return nil, err
	}
	if g.cfg.NoWords != nil && bytes.Equal(data, g.cfg.NoWords) {
		return data, nil // nothing relayed, no bound to confirm
	}
	// The words' bounds were read (cfg.Words read the time and the
	// replica) before this round starts: a leader deposed by then does not
	// confirm, and its words are dropped (the target falls back to the
	// commit). docs/guarantees.md says why this must come after the read.
	if mutation.On(mutation.WordsSkipConfirm) {
		return data, nil
	}
	start := time.Now()
	if err := g.ConfirmLeadership(ctx); err != nil {
		return nil, err
	}
	if len(data) > 2 {
		g.log.Debug("cluster: words confirmed", "node", node, "confirm", time.Since(start))
	}
	return data, nil
}

// Words serves a node's ask for the words relayed to it: only its own.
func (s *controlRPC) Words(args *wire.WordsArgs, reply *wire.WordsReply) error {
	g := s.g
	if args == nil || ValidateNodeID(args.Node) != nil {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad words request"
		return nil
	}
	if !s.authenticated && !mutation.On(mutation.WordsUnauthenticated) {
		// Nothing proves who asks (no TLS): anyone could take another
		// node's words (the ask empties the queue). Words need TLS; the
		// asker falls back to the commit.
		reply.Code, reply.Msg = wire.CodeUnsupported, "words are served only over an authenticated (TLS) connection"
		return nil
	}
	if s.peer.IsOperator() || s.peer.ID != args.Node {
		reply.Code = wire.CodeUnauthorized
		reply.Msg = fmt.Sprintf("%s may ask only for its own words, not %q's", s.peer, args.Node)
		return nil
	}
	if g.isClosing() {
		reply.Code, reply.Msg = wire.CodeClosed, "closing"
		return nil
	}
	ctx, cancel := s.ctx(args.Timeout)
	defer cancel()
	data, err := g.wordsLocal(ctx, args.Node)
	reply.Data = data
	switch {
	case err == nil:
	case errors.Is(err, ErrWordsUnsupported):
		reply.Code, reply.Msg = wire.CodeUnsupported, err.Error()
	default:
		reply.Code, reply.Msg = codeOf(err), err.Error()
	}
	return nil
}

// SendOwnerWord tells the current leader this node's word: cmd holds
// Transfers this node proposes (ControlConfig.OwnerWord there). It does
// not wait for anything but the leader's receipt; ErrNotLeader when this
// node leads (its own words do not cross the port) or the leader changed,
// ErrWordsUnsupported when the leader does not take words.
func (g *ControlGroup) SendOwnerWord(ctx context.Context, cmd []byte) error {
	var reply wire.OwnerWordReply
	addr, self, err := g.askLeader(ctx, "Control.OwnerWord", "telling a word to", &wire.OwnerWordArgs{Cmd: cmd}, &reply)
	switch {
	case self:
		return ErrNotLeader
	case err != nil:
		return err
	}
	return wordsReplyErr(reply.Code, "telling a word to", addr, reply.Msg)
}

// wordsReplyErr is the error of a words call's reply (Words, OwnerWord):
// nil for CodeOK, ErrWordsUnsupported, the codes of every call to the
// leader (leaderReplyErr), or the leader's message.
func wordsReplyErr(code wire.ReplyCode, what, addr, msg string) error {
	switch code {
	case wire.CodeOK:
		return nil
	case wire.CodeUnsupported:
		return fmt.Errorf("%w: %s: %s", ErrWordsUnsupported, addr, msg)
	}
	if err := leaderReplyErr(code, addr, msg); err != nil {
		return err
	}
	return fmt.Errorf("cluster: %s %s: %s", what, addr, msg)
}

// OwnerWord takes an old owner's word on the leader; whose word it may be
// is ControlConfig.OwnerWord's to judge from the proven peer.
func (s *controlRPC) OwnerWord(args *wire.OwnerWordArgs, reply *wire.OwnerWordReply) error {
	g := s.g
	switch {
	case args == nil || len(args.Cmd) == 0:
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad word"
	case g.cfg.OwnerWord == nil:
		reply.Code, reply.Msg = wire.CodeUnsupported, "this node takes no words"
	case g.isClosing():
		reply.Code, reply.Msg = wire.CodeClosed, "closing"
	case !g.isRaftLeader():
		reply.Code, reply.Msg = wire.CodeNotLeader, "not leader"
	default:
		// The hook judges the word against this replica: first wait,
		// bounded by RPCTimeout, until its FSM has applied everything
		// committed when the word arrived — the Revoke the sender saw
		// applied — so a leader whose replica lags does not drop a real
		// word. (The FSM's own applied index: Raft's counts an entry once
		// it handed it to the FSM, and under load the FSM lags behind
		// that.) A replica that has not caught up by then refuses the word
		// unjudged (CodeTimeout, naming both indexes): a dropped word
		// costs only time (the target moves on the commit).
		if !mutation.On(mutation.OwnerWordNoApplyWait) {
			ctx, cancel := s.ctx(0)
			err := g.waitFSMApplied(ctx, g.commitIndex())
			cancel()
			if err != nil {
				reply.Code = codeOf(err)
				reply.Msg = fmt.Sprintf("word not taken: this replica applied only up to index %d: %v", g.fsmApplied(), err)
				return nil
			}
		}
		g.cfg.OwnerWord(s.peer, s.authenticated, args.Cmd)
	}
	return nil
}
