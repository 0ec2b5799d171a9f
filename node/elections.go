package node

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// ElectionEventKind is the kind of an ElectionEvent.
type ElectionEventKind uint8

// The election event kinds (Excalibur's OnBecameLeader, OnLostLeadership,
// OnLeaderChanged).
const (
	// BecameLeader: this node became the leader at Token.
	BecameLeader ElectionEventKind = iota + 1
	// LostLeadership: this node stopped leading; workers run by RunLeader
	// have had their context cancelled.
	LostLeadership
	// LeaderChanged: the committed leader changed (any node); Leader is ""
	// while there is none.
	LeaderChanged
)

// String returns the kind's name.
func (k ElectionEventKind) String() string {
	switch k {
	case BecameLeader:
		return "became-leader"
	case LostLeadership:
		return "lost-leadership"
	case LeaderChanged:
		return "leader-changed"
	}
	return fmt.Sprintf("ElectionEventKind(%d)", uint8(k))
}

// ElectionEvent is one change of an election as seen by this node.
type ElectionEvent struct {
	Kind     ElectionEventKind
	Election string
	// Leader is the committed leader after the change.
	Leader string
	// Previous is the leader before a LeaderChanged event.
	Previous string
	// Token is the election's fencing token after the change (for
	// LostLeadership: the token that stopped being valid).
	Token Token
	At    time.Time
}

// String formats the event for logs.
func (e ElectionEvent) String() string {
	return fmt.Sprintf("%s %s leader=%q token=%s", e.Election, e.Kind, e.Leader, e.Token)
}

// Election is a named election: at most one node acts as its leader at any
// instant, and each leadership term has a fencing token. An election is
// held on one shard — its leader is that shard's acting owner — so it
// inherits the shard's guarantees: leases, graceful handover, health-based
// step-down and epochs as fencing tokens.
//
// A global election (Node.Election) is held among all nodes on the shard
// its name hashes to. A group election (Node.GroupElection) is held among
// the members of one group on a shard of its own.
//
// Elections are cheap handles: every node that asks for the same name gets
// the same election. There is nothing to start or stop: every eligible node
// is a candidate; use Resign to step down and Node.Drain or Close to stop
// being a candidate.
type Election struct {
	n     *Node
	name  string
	group string // "" for a global election
	shard uint32
	hub   hub[ElectionEvent]
}

// electionKeyPrefix is prepended to a global election's name before it is
// hashed to a shard, so an election and a data key of the same text do not
// have to share a shard.
const electionKeyPrefix = "election/"

// Election returns the global election called name. Its leader is the
// acting owner of shard ShardFor(Partitions, "election/"+name), chosen
// among all eligible nodes of the cluster (Logx's SingleInstanceGlobalWorker).
func (n *Node) Election(name string) *Election {
	shard := n.ShardFor(electionKeyPrefix + name)
	return n.election("global/"+name, func() *Election {
		return &Election{n: n, name: name, shard: shard}
	})
}

// GroupElection returns the election called name scoped to this node's
// group: its leader is always a member of the group, and every group has
// its own leader for the same name (Logx's SingleInstanceClusterWorker).
// The first call declares the election in the ledger, which gives it a
// dedicated shard the control group places only on the group's members;
// ctx bounds that commit; its errors are the commit's (ErrNoQuorum,
// ctx.Err(), ...).
func (n *Node) GroupElection(ctx context.Context, name string) (*Election, error) {
	if n.isClosed() {
		return nil, ErrClosed
	}
	key := "group/" + n.cfg.Group + "/" + name
	n.mu.Lock()
	e, ok := n.elections[key]
	n.mu.Unlock()
	if ok {
		return e, nil
	}
	shard, err := n.be.electionShard(ctx, n.cfg.Group, name)
	if err != nil {
		return nil, fmt.Errorf("node: group election %q in %q: %w", name, n.cfg.Group, err)
	}
	return n.election(key, func() *Election {
		return &Election{n: n, name: name, group: n.cfg.Group, shard: shard}
	}), nil
}

func (n *Node) election(key string, mk func() *Election) *Election {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.elections[key]; ok {
		return e
	}
	e := mk()
	if n.closed {
		e.hub.close()
	}
	n.elections[key] = e
	return e
}

// publishElectionEvents translates shard events; n.mu is held.
func (n *Node) publishElectionEvents(evs []Event) {
	keys := sortedKeys(n.elections)
	for _, k := range keys {
		e := n.elections[k]
		for _, ev := range evs {
			if ev.Shard != e.shard {
				continue
			}
			ee := ElectionEvent{Election: e.name, Leader: ev.Owner, Previous: ev.Previous, Token: ev.Token(), At: ev.At}
			switch ev.Kind {
			case ShardAcquired:
				ee.Kind = BecameLeader
			case ShardLost:
				ee.Kind = LostLeadership
			case OwnerChanged:
				ee.Kind = LeaderChanged
			}
			e.hub.publish(ee)
		}
	}
}

// Elections returns the elections this node has asked for (Election,
// GroupElection), sorted by group then name — for status pages.
func (n *Node) Elections() []*Election {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Election, 0, len(n.elections))
	for _, k := range sortedKeys(n.elections) {
		out = append(out, n.elections[k])
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].group != out[j].group {
			return out[i].group < out[j].group
		}
		return out[i].name < out[j].name
	})
	return out
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Group returns the group the election is scoped to, "" if global.
func (e *Election) Group() string { return e.group }

// Shard returns the shard the election is held on.
func (e *Election) Shard() uint32 { return e.shard }

// IsLeader reports whether this node acts as the leader right now.
func (e *Election) IsLeader() bool { return e.n.IsOwner(e.shard) }

// Leader returns the committed leader's node id, "" if there is none.
func (e *Election) Leader() string { return e.n.Owner(e.shard) }

// Token returns the fencing token of this node's leadership, or
// ErrNotLeader.
func (e *Election) Token() (Token, error) {
	tok, err := e.n.Token(e.shard)
	if err != nil {
		return Token{}, fmt.Errorf("election %q: %w", e.name, ErrNotLeader)
	}
	return tok, nil
}

// LeaseRemaining returns how long this node may keep leading without a
// lease renewal; 0 if it does not lead.
func (e *Election) LeaseRemaining() time.Duration { return e.n.LeaseRemaining(e.shard) }

// Events subscribes to the election's events with a buffer of buffer
// events (see Subscription for the buffering rules). The current leader,
// if any, is delivered first as a LeaderChanged event, followed by
// BecameLeader if it is this node.
func (e *Election) Events(buffer int) *Subscription[ElectionEvent] {
	n := e.n
	n.mu.Lock()
	defer n.mu.Unlock()
	s := e.hub.subscribe(buffer, nil)
	if v, ok := n.view[e.shard]; ok && v.owner != "" {
		tok := Token{Shard: e.shard, Epoch: v.epoch}
		now := time.Now()
		s.send(ElectionEvent{Kind: LeaderChanged, Election: e.name, Leader: v.owner, Token: tok, At: now})
		if v.acting {
			s.send(ElectionEvent{Kind: BecameLeader, Election: e.name, Leader: v.owner, Token: tok, At: now})
		}
	}
	return s
}

// WaitLeader blocks until the election has a valid leader and returns its
// id, or ctx's error.
func (e *Election) WaitLeader(ctx context.Context) (string, error) {
	var leader string
	err := e.n.waitFor(ctx, func() bool {
		leader = e.Leader()
		return leader != ""
	})
	return leader, err
}

// Resign steps down if this node leads: it stops acting as leader at once
// (RunLeader workers are cancelled and awaited), then releases the
// election with an avoid hint, so the control group grants it to another
// eligible candidate while one exists (and back to this node only when it
// is the only one). It returns ErrNotLeader if this node does not lead.
// This node stays a candidate for later terms.
func (e *Election) Resign(ctx context.Context) error {
	n := e.n
	tok, err := e.Token()
	if err != nil {
		return err
	}
	n.be.resigned(e.shard, tok.Epoch)
	n.refresh(time.Now())
	if err := n.waitFor(ctx, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.active[e.shard] == 0
	}); err != nil {
		return fmt.Errorf("node: resign %q: workers did not stop: %w", e.name, err)
	}
	if err := n.be.resign(ctx, e.shard, tok.Epoch); err != nil {
		return fmt.Errorf("node: resign %q: %w", e.name, err)
	}
	return nil
}

// Candidates returns the standing of every node that may lead the
// election (the group's members for a group election), sorted by id, with
// Leader marking the current leader.
func (e *Election) Candidates() []Candidate {
	leader := e.Leader()
	cs := e.n.candidates(func(m Member) bool { return m.ID == leader }, e.group)
	sort.Slice(cs, func(i, j int) bool { return cs[i].ID < cs[j].ID })
	return cs
}

// Run is RunLeader(ctx, e, fn).
func (e *Election) Run(ctx context.Context, fn func(ctx context.Context, tok Token) error) error {
	return e.n.RunLeader(ctx, e, fn)
}
