package node

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ownership"
)

// The work view: the shards this node may start work on, kept from the
// agent's Ready.Changes (ownership.Agent.Step) as the simulator keeps its
// acting sets — workers start and stop from it (Node.Owned, RunShard,
// RunPerShard, runTerm) instead of asking the agent about every shard.

// Token returns the fencing token of shard if this node acts as its owner
// right now, and ErrNotOwner otherwise.
func (n *Node) Token(shard uint32) (Token, error) {
	tok, _, err := n.actingToken(shard, time.Now())
	return tok, err
}

// LeaseRemaining returns how long this node may keep acting on shard
// without another lease renewal; 0 if it is not acting.
func (n *Node) LeaseRemaining(shard uint32) time.Duration {
	now := time.Now()
	_, until, err := n.actingToken(shard, now)
	if err != nil {
		return 0
	}
	return until.Sub(now)
}

func (n *Node) actingToken(shard uint32, now time.Time) (Token, time.Time, error) {
	if n.isClosed() {
		return Token{}, time.Time{}, ErrClosed
	}
	// The agent's rule (ownership.Agent.Token): acting ends a guard
	// before the lease protocol's deadline, so a worker's context is
	// cancelled before the lease ends even when the process is briefly
	// descheduled.
	epoch, until, ok := n.be.token(shard, now)
	if !ok {
		return Token{}, time.Time{}, fmt.Errorf("shard %d: %w", shard, ErrNotOwner)
	}
	return Token{Shard: shard, Epoch: epoch}, until, nil
}

// Owned returns the shards this node acts on right now, sorted.
func (n *Node) Owned() []Token {
	if n.isClosed() {
		return nil
	}
	return n.be.working(time.Now())
}

// applyChanges records the acting set's transitions of one Ready. b.mu
// held: the view follows the agent's Steps in order.
func (b *netBackend) applyChanges(changes []ownership.Change) {
	for _, c := range changes {
		if !c.Acting {
			if w, ok := b.work[c.Shard]; ok && w.Epoch == c.Epoch {
				delete(b.work, c.Shard)
			}
			continue
		}
		if b.work == nil {
			b.work = make(map[uint32]ownership.Change)
		}
		b.work[c.Shard] = c
	}
}

func (b *netBackend) token(s uint32, now time.Time) (uint64, time.Time, bool) {
	if !b.lockFreshAgent(now) {
		return 0, time.Time{}, false
	}
	defer b.mu.Unlock()
	return b.work[s].Token(now, b.agent.Guard())
}

func (b *netBackend) working(now time.Time) []Token {
	if !b.lockFreshAgent(now) {
		return nil
	}
	defer b.mu.Unlock()
	var out []Token
	for s, c := range b.work {
		if epoch, _, ok := c.Token(now, b.agent.Guard()); ok {
			out = append(out, Token{Shard: s, Epoch: epoch})
		}
	}
	slices.SortFunc(out, func(a, b Token) int { return cmp.Compare(a.Shard, b.Shard) })
	return out
}
