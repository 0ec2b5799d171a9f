// The real backend's agent shell: the goroutine that steps the pure
// ownership.Agent core (stepLatest, stepAll, stepHold) and acts on its
// Ready (dispatch: heartbeats, renewals, proposals).

package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// agentLoop steps the agent when the replica applied entries (kick) and
// at the local time its last Ready asked for, and wakes the node and the
// leader loop.
func (b *netBackend) agentLoop() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.kickCh:
		case <-timer.C:
		}
		wake := b.stepLatest(time.Now())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		wait := b.timing.RenewEvery
		if !wake.IsZero() {
			wait = min(wait, max(time.Until(wake), 0))
		}
		timer.Reset(wait)
		b.loop.Notify()
		b.notify()
	}
}

// stepLatest steps the agent with the replica's latest applied state:
// every node record and the shard records that changed since the state
// the agent last observed (ownership.ObservedSince: the ledger's change
// feed; every shard record when the feed cannot tell) — or, when the
// agent already observed that very state (states are immutable: the same
// records at the same index), only a Tick, so a node at rest does not
// copy and re-read every record on each timer and renewal. The state is
// read under b.mu, so the agent never observes an older state after a
// newer one, and agentSaw is always the state it last observed.
func (b *netBackend) stepLatest(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return time.Time{}
	}
	var in ownership.AgentInput = ownership.Tick{}
	if st := b.fsm.State(); st != b.agentSaw {
		obs := ownership.ObservedSince(b.agentSaw, st)
		b.sawVersion(obs.Version)
		in = obs
		b.agentSaw = st
	}
	rd, _ := b.stepLocked(now, in, nil)
	return rd.WakeAt
}

// step feeds one input to the agent and carries out its Ready; it returns
// the local time the agent asks to be stepped again. b.mu not held.
func (b *netBackend) step(now time.Time, in ownership.AgentInput) time.Time {
	rd, _, _ := b.stepHold(now, in, nil)
	return rd.WakeAt
}

// stepAll feeds inputs to the agent one after another and carries out
// their Readys with the proposals of all of them together, in order: one
// batch (docs/handoff.md). b.mu not held.
func (b *netBackend) stepAll(now time.Time, ins []ownership.AgentInput) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	var cmds []ledger.Command
	for _, in := range ins {
		rd := b.agent.Step(now, in)
		cmds = append(cmds, rd.Proposals...)
		rd.Proposals = nil
		b.dispatch(rd)
	}
	b.dispatch(ownership.Ready{Proposals: cmds})
}

// stepHold is step, except that the first proposal hold selects is
// returned instead of dispatched (the caller commits it itself). ok is
// false once the backend is closed.
func (b *netBackend) stepHold(now time.Time, in ownership.AgentInput, hold func(ledger.Command) bool) (rd ownership.Ready, held ledger.Command, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ownership.Ready{}, nil, false
	}
	rd, held = b.stepLocked(now, in, hold)
	return rd, held, true
}

// stepLocked is stepHold with b.mu held and the backend open.
func (b *netBackend) stepLocked(now time.Time, in ownership.AgentInput, hold func(ledger.Command) bool) (rd ownership.Ready, held ledger.Command) {
	rd = b.agent.Step(now, in)
	switch in := in.(type) {
	case ownership.HeartbeatOutcome:
		b.judgeHeartbeat(in, rd)
	case ownership.RenewOutcome:
		if b.cfg.Logger != nil && rd.Verdict != ownership.VerdictAccepted {
			b.cfg.Logger.Debug("node: renewal not accepted", "err", in.Err)
		}
	}
	if hold != nil {
		for i, c := range rd.Proposals {
			if hold(c) {
				held = c
				rd.Proposals = slices.Delete(slices.Clone(rd.Proposals), i, i+1)
				break
			}
		}
	}
	// Dispatched under b.mu: no goroutine is added once stop has set
	// closed and waits for them.
	b.dispatch(rd)
	return rd, held
}

// dispatch carries out a Ready: the acting changes update the work view
// workers start and stop from (acting.go); the heartbeat and the
// proposals run on their own goroutines (a slow commit must not delay the
// next ask). b.mu held.
func (b *netBackend) dispatch(rd ownership.Ready) {
	b.countStarts(rd.Changes)
	b.applyChanges(rd.Changes)
	if rd.Heartbeat != nil {
		ask := *rd.Heartbeat
		b.goLoop(func() { b.heartbeat(ask) })
	}
	if rd.Renew != nil {
		ask := *rd.Renew
		b.goLoop(func() { b.renew(ask) })
	}
	if len(rd.Proposals) > 0 {
		cmds := rd.Proposals
		b.goLoop(func() { b.proposeAll(cmds) })
	}
	if rd.WordAsk != nil {
		ask := *rd.WordAsk
		b.goLoop(func() { b.askWords(ask) })
	}
}

// countStarts counts the shards changes start acting on (a new shard or
// epoch), by what the start rests on: the old owner's word (cluster
// version 6, before the Transfer applied) or the committed record
// (tenure_shard_starts_total{on}). b.mu held, before applyChanges.
func (b *netBackend) countStarts(changes []ownership.Change) {
	now := time.Now()
	for _, c := range changes {
		if prev, had := b.work[c.Shard]; !c.Acting || had && prev.Epoch == c.Epoch {
			continue
		}
		on := "commit"
		if b.agent.OnWord(now, c.Shard) {
			on = "word"
			b.wordStarts.Add(1)
		}
		b.debug("shard: start", "shard", c.Shard, "epoch", c.Epoch, "on", on)
		gometrics.IncrCounterWithLabels([]string{"shard", "starts"}, 1, []gometrics.Label{{Name: "on", Value: on}})
	}
}

// judgeHeartbeat turns a heartbeat's verdict into the node's start-up
// errors; b.mu held.
func (b *netBackend) judgeHeartbeat(in ownership.HeartbeatOutcome, rd ownership.Ready) {
	if b.cfg.Logger != nil && rd.Verdict != ownership.VerdictAccepted {
		b.cfg.Logger.Debug("node: heartbeat not accepted", "err", in.Err, "rejected", in.Result.Err)
	}
	switch rd.Verdict {
	case ownership.VerdictFenced:
		if !b.registered && rd.Record.ID == b.id && rd.Record.Incarnation > b.inc && b.conflict == nil {
			b.conflict = identityConflict(b.cfg, b.id, b.inc, rd.Record.Incarnation)
		}
	case ownership.VerdictVersion:
		// This binary cannot run at the cluster's version: it must not act.
		if !b.registered && b.conflict == nil {
			b.conflict = fmt.Errorf("%w: %w (docs/upgrades.md)", ErrVersionMismatch, in.Result.Err)
		}
	}
}

// heartbeat commits one lease renewal the agent asked for and reports its
// outcome (docs/protocol.md, node side, rules 1–3).
func (b *netBackend) heartbeat(ask ownership.HeartbeatAsk) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timing.Lease)
	defer cancel()
	var r ledger.Result
	var err error
	if b.dropHeartbeats.Load() {
		err = errors.New("node: heartbeat dropped (fault injection)")
	} else {
		r, err = b.batcher.Apply(ctx, ask.Command)
	}
	b.step(time.Now(), ownership.HeartbeatOutcome{Token: ask.Token, Index: r.Index, Result: r, Err: err})
	if err == nil && r.Err == nil {
		b.acked(ctx, r.Index)
	}
	b.notify()
}

// acked follows an accepted heartbeat or renewal: the lease extends once
// the replica applied index (rule 2), and the node counts as registered
// once it holds a lease in a cluster it may run in.
func (b *netBackend) acked(ctx context.Context, index uint64) {
	_ = b.fsm.WaitApplied(ctx, index)
	cerr := b.checkCluster()
	b.stepLatest(time.Now())
	b.mu.Lock()
	switch {
	case cerr != nil && !b.registered && b.conflict == nil:
		b.conflict = cerr
	case cerr == nil && !b.agent.Status().LeaseEnd.IsZero():
		b.registered = true
	}
	b.mu.Unlock()
}

// renew sends one lease renewal the agent asked for to the control-group
// leader and reports its outcome (docs/protocol.md, renewals off the log):
// the agent extends the lease once the replica applied the leader's index.
func (b *netBackend) renew(ask ownership.RenewAsk) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timing.Lease)
	defer cancel()
	start := time.Now()
	var commit uint64
	var rec ledger.NodeRecord
	var err error
	if b.dropHeartbeats.Load() {
		err = errors.New("node: renewal dropped (fault injection)")
	} else {
		commit, rec, err = b.ctl.Renew(ctx, ask.Node, ask.Incarnation, ask.Liveness)
	}
	if err == nil {
		gometrics.MeasureSince([]string{"lease", "renew"}, start)
	}
	b.step(time.Now(), ownership.RenewOutcome{Token: ask.Token, CommitIndex: commit, Record: rec, Err: err})
	if err == nil {
		b.acked(ctx, commit)
	}
	b.notify()
}

// proposeAll commits the agent's proposals (handoffs, drain
// reconciliation) together, in order — one entry, usually (Batcher.ApplyAll)
// — and waits until the replica applied them; their effect reaches the
// agent through the replica.
func (b *netBackend) proposeAll(cmds []ledger.Command) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timing.Lease)
	defer cancel()
	b.tellWords(cmds)
	if b.cfg.Logger != nil {
		for _, c := range cmds {
			for _, tf := range transfersOf(c, nil) {
				b.debug("words: Transfer proposed", "shard", tf.Shard, "epoch", tf.Epoch, "to", tf.To)
			}
		}
	}
	res, errs := b.batcher.ApplyAll(ctx, cmds)
	var last uint64
	for i := range cmds {
		if errs[i] == nil && res[i].Err == nil {
			last = max(last, res[i].Index)
		}
	}
	if last > 0 {
		_ = b.fsm.WaitApplied(ctx, last)
	}
	b.kick()
}
