package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// The leader shell's adapters: node/ runs leaderLoop (leaderloop.go, the
// goroutine around the pure ownership.Leader core) over the control group
// (Barrier, proposals through the batcher), gossip and this replica (the
// planner's input), and serves lease renewals through it.

// loopProposer adapts the backend to the ownership leader loop.
type loopProposer struct{ b *netBackend }

func (p loopProposer) Barrier(ctx context.Context) error { return p.b.ctl.Barrier(ctx) }

func (p loopProposer) Propose(ctx context.Context, cmd ledger.Command) error {
	if h, ok := p.b.fsm.HaltedAt(); ok {
		// The plan was made from a replica that stopped applying: stale.
		return fmt.Errorf("node: not proposing from a halted replica: %w", h)
	}
	data, err := ledger.Encode(cmd)
	if err != nil {
		return err
	}
	r, err := p.b.ctl.Apply(ctx, data)
	if err != nil {
		return err
	}
	return r.Err
}

// ProposeAll implements batchProposer: the round's commands go
// through the backend's batcher at once, in order (a round's expiries come
// before the grants they make possible), which commits them in a few Batch
// entries (each command with its own result) instead of one entry and one
// commit round trip each.
func (p loopProposer) ProposeAll(ctx context.Context, cmds []ledger.Command) []error {
	errs := make([]error, len(cmds))
	if h, ok := p.b.fsm.HaltedAt(); ok {
		for i := range errs {
			errs[i] = fmt.Errorf("node: not proposing from a halted replica: %w", h)
		}
		return errs
	}
	res, errs := p.b.batcher.ApplyAll(ctx, cmds)
	for i := range errs {
		if errs[i] == nil {
			errs[i] = res[i].Err
		}
	}
	return errs
}

// loopSource feeds the planner: gossip's view plus the committed table.
type loopSource struct{ b *netBackend }

func (s loopSource) Input() ownership.Input {
	st := s.b.fsm.State()
	// The planner runs on the control-group leader, whose configuration
	// is the voter set's latest word.
	voters := s.b.ctl.Voters()
	var members []ownership.Member
	for _, m := range s.b.gossip.Members() {
		members = append(members, ownership.Member{
			ID: m.ID, Incarnation: m.Incarnation, State: m.State,
			Health: m.Health, Draining: m.Draining, Group: m.Tags[groupTag],
			NoShards: ownsNoShards(m.Tags, slices.Contains(voters, m.ID)),
			Weight:   gossipedWeight(m.Tags), Zone: m.Tags[zoneTag], Load: parseLoad(m.Tags[loadTag]),
		})
	}
	return ownership.InputOf(st, members)
}

// sawVersion records when this process first saw cluster version 4 active
// in its replica (v4At). Recorded after the fact (the agent loop runs on
// every apply), which only moves the leader's bound later: safe.
func (b *netBackend) sawVersion(v uint32) {
	if v >= ledger.VersionLeaseRenewals && b.v4At.Load() == nil {
		now := time.Now()
		b.v4At.CompareAndSwap(nil, &now)
	}
}

// renewalsSince is loopConfig.RenewalsSince: the local time this process
// first saw cluster version 4 active in its replica (zero: not yet), read
// after the leader's Barrier; the leader core never puts its bound
// earlier (ownership.EstablishBound).
func (b *netBackend) renewalsSince() time.Time {
	b.sawVersion(b.fsm.State().ActiveVersion())
	if tv := b.v4At.Load(); tv != nil {
		return *tv
	}
	return time.Time{}
}

// renewReady returns a channel closed when this node's leader loop next
// establishes a term (cluster.ControlConfig.RenewReady): a renewal the
// loop refused as not established yet waits for it.
func (b *netBackend) renewReady() <-chan struct{} {
	b.renewMu.Lock()
	defer b.renewMu.Unlock()
	if b.established == nil {
		b.established = make(chan struct{})
	}
	return b.established
}

// termEstablished wakes the renewals waiting for this term
// (loopConfig.OnEstablished).
func (b *netBackend) termEstablished() {
	b.renewMu.Lock()
	defer b.renewMu.Unlock()
	if b.established != nil {
		close(b.established)
	}
	b.established = make(chan struct{})
}

// serveRenew judges a renewal this node received as the control-group
// leader: the planner accepts it or refuses it (leaderLoop.Renew); the
// control group then confirms leadership before acknowledging it.
func (b *netBackend) serveRenew(now time.Time, req cluster.RenewRequest) (ledger.NodeRecord, error) {
	st := b.fsm.State()
	rec, _ := st.Node(req.Node)
	if v := st.ActiveVersion(); v < ledger.VersionLeaseRenewals {
		return rec, fmt.Errorf("node: renewals off the log need cluster version %d, the leader's replica is at %d", ledger.VersionLeaseRenewals, v)
	}
	if r, revoked := st.Revoked(req.Node, ""); revoked {
		return rec, fmt.Errorf("%w: node %q is revoked (%s): it renews nothing", ledger.ErrRevoked, req.Node, r.Reason)
	}
	loop := b.loopReady.Load()
	if loop == nil {
		return rec, ownership.ErrNotLeader
	}
	if err := loop.Renew(now, rec, req.Incarnation, req.Liveness); err != nil {
		return rec, err
	}
	b.renewMu.Lock()
	if b.renewSeen == nil {
		b.renewSeen = map[string]time.Time{}
	}
	if now.After(b.renewSeen[req.Node]) {
		b.renewSeen[req.Node] = now
	}
	b.renewMu.Unlock()
	return rec, nil
}
