package cluster

// Leadership confirm rounds and the new leader's bound (docs/protocol.md,
// "Renewals off the log", design steps 7–8).
//
// A leader that acknowledges a lease renewal first confirms, with a quorum
// of voters, that it still leads its term: Control.Confirm. Every voter
// records the time of each Confirm it receives (its monotonic clock,
// lastConfirm, per term) BEFORE it checks that it still follows the sender
// in that term. A voter that has moved to a later term answers no, so a
// deposed leader cannot complete a round once a quorum voted for a
// successor, and every record that backed a yes predates the voter's vote
// for any later term.
//
// A new leader of term T asks every voter for the age of its newest record
// of terms < T (Control.ConfirmAge); a voter answers only once its own
// term is ≥ T, when those records are final. Any quorum of answers meets
// every confirm quorum of earlier terms, so
//
//	bound = max over answers (receive time − age)
//
// is no earlier than the last confirm that backed any renewal acknowledged
// in an earlier term. A process that restarts forgets its records; it
// counts its own start as a confirm of every earlier term, which only
// moves the bound later (the safe direction).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// confirmTermsKept is how many terms' lastConfirm records a voter keeps;
// older ones fold into one floor record (still answered, never lost).
const confirmTermsKept = 4

// confirmLog is a voter's lastConfirm record per term.
type confirmLog struct {
	mu    sync.Mutex
	terms map[uint64]time.Time // term → newest Confirm received for it
	// floor covers every term ≤ floorTerm that is not in terms: the
	// process start (term 0) and any record folded away.
	floorTerm uint64
	floorAt   time.Time
}

func newConfirmLog(start time.Time) *confirmLog {
	return &confirmLog{terms: map[uint64]time.Time{}, floorAt: start}
}

// record notes a Confirm of term received at now.
func (c *confirmLog) record(term uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term <= c.floorTerm {
		if now.After(c.floorAt) {
			c.floorAt = now
		}
		return
	}
	if now.After(c.terms[term]) {
		c.terms[term] = now
	}
	for len(c.terms) > confirmTermsKept {
		oldest := uint64(0)
		for t := range c.terms {
			if oldest == 0 || t < oldest {
				oldest = t
			}
		}
		if at := c.terms[oldest]; at.After(c.floorAt) {
			c.floorAt = at
		}
		c.floorTerm = oldest
		delete(c.terms, oldest)
	}
}

// newestBefore is the newest record of any term < term (the floor always
// counts: it is at least the process start).
func (c *confirmLog) newestBefore(term uint64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.floorAt
	for t, r := range c.terms {
		if t < term && r.After(at) {
			at = r
		}
	}
	return at
}

// confirmBatcher runs one confirm round at a time; callers that arrive while
// a round is in flight share the next one.
type confirmBatcher struct {
	mu      sync.Mutex
	running bool
	next    *confirmRound
}

type confirmRound struct {
	done chan struct{}
	err  error
}

// ConfirmLeadership confirms, with a quorum of voters (this node included),
// that this node is still the leader of its current term: every voter that
// answers yes first recorded the time (see Control.ConfirmAge). Concurrent
// callers share a round; a caller that arrives while a round is in flight
// waits for the next one, so the round that answers it started after the
// call. It returns nil, ErrNotLeader, ErrLeadershipLost (no quorum said
// yes), ErrTimeout (ctx ended) or ErrControlClosed.
func (g *ControlGroup) ConfirmLeadership(ctx context.Context) error {
	b := &g.confirmBatch
	b.mu.Lock()
	if b.next == nil {
		b.next = &confirmRound{done: make(chan struct{})}
	}
	r := b.next
	if !b.running {
		b.running = true
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.confirmRounds()
		}()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("%w: confirming leadership: %w", ErrTimeout, ctx.Err())
	case <-g.closing:
		return ErrControlClosed
	}
}

// confirmRounds runs rounds while callers wait for one.
func (g *ControlGroup) confirmRounds() {
	b := &g.confirmBatch
	for {
		b.mu.Lock()
		r := b.next
		b.next = nil
		if r == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		r.err = g.confirmOnce()
		close(r.done)
	}
}

// confirmTimeout bounds one confirm round or one ConfirmAge query: about an
// election timeout (a voter that does not answer by then is as good as
// absent for leadership too).
func (g *ControlGroup) confirmTimeout() time.Duration {
	d := g.cfg.ElectionTimeout
	if d <= 0 || (g.cfg.RPCTimeout > 0 && g.cfg.RPCTimeout < d) {
		d = g.cfg.RPCTimeout
	}
	if d <= 0 {
		d = time.Second
	}
	return d
}

// voters returns the voters of the latest configuration (id → address).
func (g *ControlGroup) voterAddrs() map[string]string {
	conf, err := g.latestConfiguration()
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			out[string(s.ID)] = string(s.Address)
		}
	}
	return out
}

// confirmOnce runs one round.
func (g *ControlGroup) confirmOnce() error {
	if g.isClosing() {
		return ErrControlClosed
	}
	term := g.currentTerm()
	// This node's own yes: record first, then check (as every voter does).
	g.confirms.record(term, time.Now())
	if !g.isRaftLeader() || g.currentTerm() != term {
		return ErrNotLeader
	}
	voters := g.voterAddrs()
	if _, ok := voters[g.cfg.NodeID]; !ok {
		return fmt.Errorf("%w: not a voter of the latest configuration", ErrNotLeader)
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.confirmTimeout())
	defer cancel()
	args := wire.ConfirmArgs{Term: term, Leader: g.cfg.NodeID}
	q, err := quorumCall(ctx, g, voters, "Control.Confirm", &args, func(r *wire.ConfirmReply, _ time.Time) bool { return r.Yes })
	if err != nil && !errors.Is(err, ErrTimeout) {
		return err
	}
	if !q.reached() {
		return fmt.Errorf("%w: %d of %d voters confirmed term %d (quorum %d)", ErrLeadershipLost, q.yes, q.voters, term, q.quorum)
	}
	return nil
}

// quorumTally is the outcome of a quorumCall: yes counts this node.
type quorumTally struct{ yes, voters, quorum int }

func (q quorumTally) reached() bool { return q.yes >= q.quorum }

// quorumCall sends one call of method to every voter but this node, in
// parallel, counts this node as the first yes, and returns as soon as a
// quorum (a majority of voters) said yes or so many failed or said no that
// no quorum can — without waiting for the slowest voters, a dead one
// included. accept judges one successful reply (on the caller's goroutine,
// one at a time; recv is when the reply arrived). It returns ErrTimeout
// when ctx ended first and ErrControlClosed when the group closes; the
// tally says how far it got either way. The one place ConfirmLeadership
// and EstablishBound count a quorum.
func quorumCall[R any](ctx context.Context, g *ControlGroup, voters map[string]string, method string, args any, accept func(r *R, recv time.Time) bool) (quorumTally, error) {
	q := quorumTally{yes: 1, voters: len(voters), quorum: len(voters)/2 + 1}
	if q.reached() {
		return q, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the calls still out end (their replies are not read)
	type answer struct {
		reply R
		recv  time.Time
		ok    bool
	}
	answers := make(chan answer, len(voters))
	for id, addr := range voters {
		if id == g.cfg.NodeID {
			continue
		}
		go func() {
			var reply R
			err := g.pool.call(ctx, addr, method, args, &reply)
			if err != nil {
				// reply is not ours to read: after a timeout net/rpc may
				// still decode a late answer into it.
				answers <- answer{}
				return
			}
			answers <- answer{reply: reply, recv: time.Now(), ok: true}
		}()
	}
	no := 0
	for !q.reached() && no <= q.voters-q.quorum {
		select {
		case a := <-answers:
			if a.ok && accept(&a.reply, a.recv) {
				q.yes++
			} else {
				no++
			}
		case <-ctx.Done():
			return q, fmt.Errorf("%w: %s: %w", ErrTimeout, method, ctx.Err())
		case <-g.closing:
			return q, ErrControlClosed
		}
	}
	return q, nil
}

// Confirm is a leader's confirm round (see ConfirmLeadership). The voter
// records the time first and only then checks its term and leader.
func (s *controlRPC) Confirm(args *wire.ConfirmArgs, reply *wire.ConfirmReply) error {
	g := s.g
	if args == nil || args.Term == 0 || ValidateNodeID(args.Leader) != nil {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad confirm request"
		return nil
	}
	if s.authenticated && (!s.peer.VoterCapable() || s.peer.ID != args.Leader || !s.isVoter(s.peer.ID)) {
		reply.Code = wire.CodeUnauthorized
		reply.Msg = fmt.Sprintf("%s may not confirm leadership for %q (only a voter, for itself)", s.peer, args.Leader)
		g.log.Warn("cluster: refused a confirm", "peer", s.peer.String(), "leader", args.Leader)
		return nil
	}
	g.confirms.record(args.Term, time.Now())
	_, leader := g.leaderWithID()
	reply.Yes = g.currentTerm() == args.Term && string(leader) == args.Leader
	return nil
}

// ConfirmAge answers a new leader's query (design step 8): once this node's
// term is ≥ args.Term, the age of its newest confirm record of an earlier
// term. It waits (within the call's timeout) for its term to catch up.
func (s *controlRPC) ConfirmAge(args *wire.ConfirmAgeArgs, reply *wire.ConfirmAgeReply) error {
	g := s.g
	if args == nil || args.Term == 0 {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad confirm-age request"
		return nil
	}
	if s.authenticated && (!s.peer.VoterCapable() || !s.isVoter(s.peer.ID)) {
		reply.Code = wire.CodeUnauthorized
		reply.Msg = fmt.Sprintf("%s is not a voter", s.peer)
		return nil
	}
	ctx, cancel := s.ctx(g.confirmTimeout())
	defer cancel()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for g.currentTerm() < args.Term {
		select {
		case <-ctx.Done():
			reply.Code, reply.Msg = wire.CodeTimeout, fmt.Sprintf("term %d not reached", args.Term)
			return nil
		case <-g.closing:
			reply.Code, reply.Msg = wire.CodeClosed, "closing"
			return nil
		case <-t.C:
		}
	}
	reply.Age = time.Since(g.confirms.newestBefore(args.Term))
	return nil
}

func (s *controlRPC) isVoter(id string) bool {
	_, ok := s.g.voterAddrs()[id]
	return ok
}

// EstablishBound is what a new leader may assume about renewals granted in
// earlier terms (design step 8): every renewal acknowledged by an earlier
// leader was received before the returned time. It asks every voter for the
// age of its newest confirm record of an earlier term and, with answers
// from a quorum (this node included), returns max(receive time − age),
// never later than now. Without a quorum of answers within about an
// election timeout (old binaries, partitions) it returns now.
func (g *ControlGroup) EstablishBound(ctx context.Context, now time.Time) time.Time {
	term := g.currentTerm()
	voters := g.voterAddrs()
	if _, ok := voters[g.cfg.NodeID]; !ok || term == 0 {
		return now
	}
	bound := g.confirms.newestBefore(term)
	ctx, cancel := context.WithTimeout(ctx, g.confirmTimeout())
	defer cancel()
	args := wire.ConfirmAgeArgs{Term: term}
	q, _ := quorumCall(ctx, g, voters, "Control.ConfirmAge", &args, func(r *wire.ConfirmAgeReply, recv time.Time) bool {
		if r.Code != wire.CodeOK || r.Age < 0 {
			return false
		}
		if at := recv.Add(-r.Age); at.After(bound) {
			bound = at
		}
		return true
	})
	if !q.reached() {
		g.log.Info("cluster: no quorum of confirm ages; new leader's bound is now", "answers", q.yes, "quorum", q.quorum)
		return now
	}
	g.log.Debug("cluster: new leader's bound", "term", term, "answers", q.yes, "took", time.Since(now), "before_now", now.Sub(bound))
	if bound.After(now) {
		return now
	}
	return bound
}
