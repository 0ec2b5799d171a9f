package cluster

// Pushing the commit index to the followers at once (PushCommit).

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// PushCommit makes the followers learn the leader's current commit index
// now instead of at Raft's next commit tick. hashicorp/raft's heartbeats
// carry no commit index: a follower learns that an entry committed with
// the next AppendEntries that carries entries, or, when no more entries
// flow, from the replication loop's idle send every CommitTimeout to
// 2·CommitTimeout (50–100 ms with DefaultControlConfig). A command whose
// effect another node waits for — a shard handed to a new owner — would
// sit committed but unapplied on that node for that long.
//
// A push is that idle send, made now: the leader sends every follower in
// its Raft configuration (voters and non-voters) an AppendEntries of its
// current term with no entries, whose previous entry is the entry at its
// commit index and whose commit index is that index — exactly what its
// replication loop sends a follower that has everything. A follower
// whose log holds that entry at that term holds the leader's log up to it
// (Raft's log matching), so it may and does commit and apply up to it;
// one that lacks it refuses and changes nothing. The push appends
// nothing: no entry, no fsync on any node — one round trip, then the
// follower applies. (The commit index, not raft's AppliedIndex: raft
// counts an entry applied only after handing it to the FSM, so a caller
// whose command has applied can still read an AppliedIndex below it, and
// its push would miss the command.)
//
// When a follower answers that it lacks the entry (it is behind; the
// entries it is still to receive will carry the commit index unless they
// left the leader before it), and when this node has not yet established
// its leadership (control_leader.go), the push appends
// ControlConfig.PushCommand instead, as every push did before the
// release that brings cluster version 5: a command the FSM applies as a no-op, whose replication
// carries the commit index. (Not a Raft Barrier: the FSM never sees a
// LogBarrier entry, so a replica's applied index would stay below the
// log's last index until the next command, and anything that waits for
// the replica to apply the leader's last index — a lease renewal's
// acknowledgement — would wait with it.)
//
// Leader only, and only with a PushCommand: elsewhere it does nothing. It
// never blocks: calls while a push is being sent are coalesced into one
// more push after it; at most one push per follower is in flight, and at
// most one PushCommand entry. Call it for the commands that hand work
// over, not for every command.
func (g *ControlGroup) PushCommit() {
	if len(g.cfg.PushCommand) > 0 {
		signal(g.pushSig)
	}
}

// pushLoop serves PushCommit.
func (g *ControlGroup) pushLoop() {
	for {
		entry := false
		select {
		case <-g.pushSig:
		case <-g.pushEntrySig:
			entry = true
		case <-g.closing:
			return
		}
		r := g.rft()
		if r == nil || r.State() != raft.Leader {
			continue
		}
		if !entry && g.pushCommitIndex() {
			continue
		}
		// The entry is appended after every entry committed so far, so
		// its replication carries their commit. Waiting for it keeps one
		// entry push in flight; pushes asked for meanwhile run next, once.
		err := g.wait(r.Apply(g.cfg.PushCommand, g.cfg.HeartbeatTimeout+g.cfg.ElectionTimeout))
		if err != nil && g.isRaftLeader() {
			g.log.Debug("cluster: commit push failed", "err", err)
		}
	}
}

// pushCommitIndex sends every follower an AppendEntries without entries
// that carries this leader's commit index (PushCommit). It returns false, having sent nothing, when it cannot
// vouch for the request: this node is not the established leader of its
// current term, or the entry is no longer in its log. Answers arrive
// later; a follower that lacked the entry asks for an entry push.
func (g *ControlGroup) pushCommitIndex() bool {
	term := g.currentTerm()
	if g.established.Load() != term || !g.isRaftLeader() {
		return false
	}
	index := g.commitIndex()
	var prev raft.Log
	if index == 0 || g.cfg.LogStore.GetLog(index, &prev) != nil {
		return false
	}
	// Still the leader of that term: the request speaks for it.
	if g.currentTerm() != term || !g.isRaftLeader() {
		return false
	}
	self := raft.ServerID(g.cfg.NodeID)
	trans := g.pushTrans
	addr := trans.EncodePeer(self, trans.LocalAddr())
	conf, err := g.latestConfiguration()
	if err != nil {
		return false
	}
	for _, s := range conf.Servers {
		if s.ID == self {
			continue
		}
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(self), Addr: addr},
			Term:      term,
			// Raft's own replication fills the deprecated Leader field
			// too (followers of older protocol versions read it).
			//lint:ignore SA1019 kept for wire compatibility, as raft's replicate does
			Leader:            addr,
			PrevLogEntry:      prev.Index,
			PrevLogTerm:       prev.Term,
			LeaderCommitIndex: prev.Index,
		}
		v, _ := g.pushing.LoadOrStore(s.ID, &pushPeer{})
		pp := v.(*pushPeer)
		pp.mu.Lock()
		if pp.inflight {
			// Sent after the one in flight, with this newer index.
			pp.next, pp.nextAddr = req, s.Address
			pp.mu.Unlock()
			continue
		}
		pp.inflight = true
		pp.mu.Unlock()
		g.wg.Add(1)
		go func(id raft.ServerID, target raft.ServerAddress) {
			defer g.wg.Done()
			for req != nil {
				g.sendCommitPush(id, target, req)
				pp.mu.Lock()
				req, target, pp.next = pp.next, pp.nextAddr, nil
				pp.inflight = req != nil
				pp.mu.Unlock()
			}
		}(s.ID, s.Address)
	}
	return true
}

// pushPeer is one follower's commit pushes: at most one in flight, and
// the newest one asked for meanwhile, sent after it.
type pushPeer struct {
	mu       sync.Mutex
	inflight bool
	next     *raft.AppendEntriesRequest
	nextAddr raft.ServerAddress
}

// pushRetries are the waits before each new try of a commit push that a
// follower refused for lack of the entry: the AppendEntries that carries
// it left the leader before the commit and may simply not have arrived
// yet (it carries the older commit index, so the follower needs the push
// after it). Past them the follower is behind, and an entry push follows.
var pushRetries = [...]time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond}

// sendCommitPush sends one follower a commit push (pushCommitIndex).
func (g *ControlGroup) sendCommitPush(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest) {
	for try := 0; ; try++ {
		var resp raft.AppendEntriesResponse
		if err := g.pushTrans.AppendEntries(id, target, req, &resp); err != nil {
			return // unreachable: raft's own replication deals with it
		}
		if resp.Success || resp.Term != req.Term {
			return // applied, or a newer term: raft's own replication steps this leader down
		}
		if try == len(pushRetries) || resp.LastLog >= req.PrevLogEntry {
			// Behind for longer, or its entry at PrevLogEntry has another
			// term (it is to be overwritten): replication will carry on.
			g.log.Debug("cluster: commit push refused; pushing an entry", "peer", id, "index", req.PrevLogEntry, "peer_last", resp.LastLog)
			signal(g.pushEntrySig)
			return
		}
		select {
		case <-time.After(pushRetries[try]):
		case <-g.closing:
			return
		}
	}
}
