package simulation

import (
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// The handoff on the old owner's word (cluster version 6,
// ledger.VersionHandoffWords; ownership/word.go). The old owner's
// Transfer is also a message to the control-group leader (as node/
// forwards it over the RPC port, the sender proven by its certificate:
// here the leader checks that the sender is the Transfer's From). The
// leader keeps it for the target until the target's ask for words
// (ownership.WordAsk, a long poll) is there, and answers that ask with the
// bound its planner gives at that instant (ownership.Leader.WordValid,
// read after receipt). Every message can be delayed (reordering them),
// lost, or cut by a partition; the old owner can die right after its word;
// the leader can change or die while it holds words (they are lost with
// it: the move then completes on the commit).

// wordAsk is an ask for words a leader holds.
type wordAsk struct {
	asker
	ask ownership.WordAsk
}

// wordDelay is one message's network delay: mostly sub-millisecond, one
// in twenty slow (so messages overtake one another).
func (s *Sim) wordDelay() time.Duration {
	d := s.jitter(100*time.Microsecond, time.Millisecond)
	if s.chance(0.05) {
		d += s.jitter(5*time.Millisecond, 150*time.Millisecond)
	}
	return d
}

// askWords sends n's ask for words to the leader.
func (s *Sim) askWords(n *node, ask ownership.WordAsk) {
	r := s.raft
	a := &wordAsk{asker: askerOf(n), ask: ask}
	if r.leader < 0 || !r.link(n.idx, r.leader) || !s.nodes[r.leader].up || s.chance(0.02) {
		s.wordAnswer(a, s.jitter(5*time.Millisecond, 100*time.Millisecond), ownership.WordOutcome{Token: ask.Token, Err: ownership.ErrNotLeader})
		return
	}
	l := s.nodes[r.leader]
	s.onNode(l, s.wordDelay(), evWord, func() { s.receiveWordAsk(l, a) })
}

// receiveWordAsk is the leader l receiving a: it answers at once when it
// holds words for the sender, else after ownership.WordHold (its clock).
func (s *Sim) receiveWordAsk(l *node, a *wordAsk) {
	if s.raft.leader != l.idx || l.lead == nil || !l.lead.Established() {
		s.wordReply(l, a, ownership.WordOutcome{Token: a.ask.Token, Err: ownership.ErrNotLeader})
		return
	}
	id := a.from.id
	if old := l.wordAsks[id]; old != nil {
		s.wordReply(l, old, ownership.WordOutcome{Token: old.ask.Token}) // superseded: empty
	}
	l.wordAsks[id] = a
	if len(l.wordQueue[id]) > 0 {
		s.answerWords(l, id)
		return
	}
	s.onNode(l, l.trueAfter(ownership.WordHold(s.cfg.Ownership)), evWord, func() {
		if l.wordAsks[id] == a {
			s.answerWords(l, id)
		}
	})
}

// sendWord is the old owner n's Transfer reaching the leader as its word
// (only in a cluster that runs version 6 by n's replica); it reports
// whether the word was sent.
func (s *Sim) sendWord(n *node, tf ledger.Transfer) bool {
	r := s.raft
	if !s.replica(n).VersionActive(ledger.VersionHandoffWords) || r.leader < 0 || !r.link(n.idx, r.leader) || s.chance(0.02) {
		return false
	}
	l := s.nodes[r.leader]
	s.onNode(l, s.wordDelay(), evWord, func() { s.receiveWord(l, n, tf) })
	return true
}

// receiveWord is the leader l receiving from's Transfer: kept for its
// target when the sender is the Transfer's From (the certificate's
// check) and l's replica shows the shard Revoking from it toward the
// target at the Transfer's epoch.
func (s *Sim) receiveWord(l, from *node, tf ledger.Transfer) {
	if s.raft.leader != l.idx || l.lead == nil || !l.lead.Established() || from.id != tf.From {
		return
	}
	rec, _ := s.replica(l).Shard(tf.Shard)
	if rec.State != ledger.ShardRevoking || rec.Owner != tf.From || rec.Target != tf.To || rec.Epoch != tf.Epoch {
		return
	}
	q := l.wordQueue[tf.To]
	for _, old := range q {
		if old.Shard == tf.Shard && old.Epoch == tf.Epoch {
			return
		}
	}
	if len(q) >= ownership.MaxHeldWords {
		return
	}
	l.wordQueue[tf.To] = append(q, tf)
	if l.wordAsks[tf.To] != nil {
		s.answerWords(l, tf.To)
	}
}

// answerWords answers id's ask on the leader l with every word queued
// for id that its planner still bounds now.
func (s *Sim) answerWords(l *node, id string) {
	a := l.wordAsks[id]
	delete(l.wordAsks, id)
	q := l.wordQueue[id]
	delete(l.wordQueue, id)
	out := ownership.WordOutcome{Token: a.ask.Token}
	now := l.localTime(s.now)
	st := s.replica(l)
	for _, tf := range q {
		rec, _ := st.Shard(tf.Shard)
		if rec.Epoch != tf.Epoch {
			continue
		}
		if d, ok := l.lead.WordValid(now, rec, tf.From, tf.To); ok {
			out.Words = append(out.Words, ownership.Word{Shard: tf.Shard, Epoch: tf.Epoch, From: tf.From, To: tf.To, Valid: d})
		}
	}
	s.res.WordsRelayed += len(out.Words)
	s.wordReply(l, a, out)
}

// wordReply sends out back to a's process (lost on a cut link, or one in
// fifty).
func (s *Sim) wordReply(l *node, a *wordAsk, out ownership.WordOutcome) {
	if !s.raft.link(l.idx, a.from.idx) || s.chance(0.02) {
		return // lost: the agent asks again after its poll timeout
	}
	s.wordAnswer(a, s.wordDelay(), out)
}

// wordAnswer delivers out to a's process after d.
func (s *Sim) wordAnswer(a *wordAsk, d time.Duration, out ownership.WordOutcome) {
	s.answer(&a.asker, d, evWord, out)
}
