// The real backend's commit path: a command goes through the batcher to the
// control group, the node waits until its replica applied it, and the
// control group's and the ledger's errors map onto node's. Drain, handoff,
// resign and worker proposals commit through here.

package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// commit applies one command through the batcher, waits until this node's
// replica applied it (read your writes) and maps the ledger's verdict.
func (b *netBackend) commit(ctx context.Context, c ledger.Command) (ledger.Result, error) {
	r, err := b.batcher.Apply(ctx, c)
	if err != nil {
		return r, mapControlErr(err)
	}
	if werr := b.fsm.WaitApplied(ctx, r.Index); werr != nil {
		return r, werr
	}
	b.kick()
	return r, mapLedgerErr(r.Err)
}

// commitRetry commits c, retrying while nothing could be committed or the
// outcome is unknown (every ledger command is a compare-and-set, so a
// retry never applies a transition twice). When a retry is rejected after
// an unknown outcome, done decides from the committed state whether the
// first try succeeded, and returns its result.
func (b *netBackend) commitRetry(ctx context.Context, c ledger.Command, done func(*ledger.State) (ledger.Result, bool)) (ledger.Result, error) {
	unknown := false
	backoff := 10 * time.Millisecond
	for {
		r, err := b.commit(ctx, c)
		if err != nil && errors.Is(err, ErrNoQuorum) && ctx.Err() == nil && b.ctx.Err() == nil {
			unknown = unknown || errors.Is(err, ownership.ErrLeadershipLost)
			select {
			case <-ctx.Done():
				return r, err
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, b.timing.RenewEvery)
			continue
		}
		if err != nil && unknown && done != nil {
			if r2, ok := done(b.fsm.State()); ok {
				return r2, nil
			}
		}
		return r, err
	}
}

// mapControlErr maps a commit failure to the node's sentinels.
func mapControlErr(err error) error {
	switch {
	case errors.Is(err, ownership.ErrLeadershipLost):
		return fmt.Errorf("%w: outcome unknown: %w", ErrNoQuorum, err)
	case errors.Is(err, ledger.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, ErrUnauthorized):
		return err
	case isInvalid(err):
		// The batcher could not encode the command (a field over the
		// ledger's limits): nothing was proposed, and a retry fails alike.
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", ErrNoQuorum, err)
}

// mapLedgerErr maps a ledger rejection to the node's sentinels, keeping
// the ledger's error (and its details) in the chain.
func mapLedgerErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ledger.ErrStaleEpoch):
		return fmt.Errorf("%w: %w", ErrStaleToken, err)
	case errors.Is(err, ledger.ErrNotOwner):
		return fmt.Errorf("%w: %w", ErrNotOwner, err)
	case errors.Is(err, ledger.ErrJobState), errors.Is(err, ledger.ErrWrongAttempt), errors.Is(err, ledger.ErrJobFinished):
		return fmt.Errorf("%w: %w", ErrJobState, err)
	case errors.Is(err, ledger.ErrUnknownJob):
		return fmt.Errorf("%w: %w", ErrJobNotFound, err)
	case errors.Is(err, ledger.ErrUnknownType):
		return fmt.Errorf("%w: %w", ErrUnknownType, err)
	case errors.Is(err, ledger.ErrQueueFull):
		return fmt.Errorf("%w: %w", ErrQueueFull, err)
	case errors.Is(err, ledger.ErrRequestIDReused):
		return fmt.Errorf("%w: %w", ErrRequestIDReused, err)
	case isInvalid(err):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// isInvalid reports whether the ledger refused a command for its content
// (encoding limits, malformed or invalid fields), not for its moment.
func isInvalid(err error) bool {
	return errors.Is(err, ledger.ErrTooLarge) || errors.Is(err, ledger.ErrMalformed) ||
		errors.Is(err, ledger.ErrInvalid) || errors.Is(err, ledger.ErrVersion) ||
		errors.Is(err, cluster.ErrBadRequest) // the leader's CheckCommand refused it

}

func (b *netBackend) setDraining(ctx context.Context, draining bool) error {
	if err := b.gossip.UpdateMeta(func(m *cluster.Meta) { m.Draining = draining }); err != nil {
		return err
	}
	// The agent proposes the wish now (committed here, so the caller learns
	// the outcome) and again until the node's record agrees.
	_, set, ok := b.stepHold(time.Now(), ownership.DrainWish{Draining: draining}, func(c ledger.Command) bool {
		_, is := c.(ledger.SetDraining)
		return is
	})
	if !ok {
		return ErrClosed
	}
	if set == nil {
		return nil
	}
	_, err := b.commitRetry(ctx, set, nil)
	return err
}

func (b *netBackend) handoff(ctx context.Context, shards []shardEpoch) error {
	in := make([]ownership.AgentInput, len(shards))
	for i, se := range shards {
		in[i] = ownership.ShardDrained{Shard: se.shard, Epoch: se.epoch}
	}
	b.stepAll(time.Now(), in)
	return nil
}

func (b *netBackend) resign(ctx context.Context, s uint32, epoch uint64) error {
	_, err := b.commitRetry(ctx, ledger.Release{Shard: s, Epoch: epoch, Owner: b.id, Now: time.Now().UnixNano(), Avoid: true},
		func(st *ledger.State) (ledger.Result, bool) {
			r, ok := st.Shard(s)
			return ledger.Result{Shard: r}, ok && r.Epoch == epoch && r.State == ledger.ShardUnowned
		})
	if err != nil && errors.Is(err, ledger.ErrConflict) {
		// From version 6 the ledger refuses to release a shard revoked
		// toward a target (its target may act on this node's word): the
		// handoff is under way, by the Transfer the agent proposed (or the
		// leader's grant after the takeover wait). This node has stopped.
		if r, ok := b.fsm.State().Shard(s); ok && (r.Epoch != epoch || (r.State == ledger.ShardRevoking && r.Target != "")) {
			return nil
		}
	}
	return err
}

// withRequestID wraps c in a ledger.Session — with id, or a fresh one when
// id is zero — once the cluster runs ledger.VersionRequestIDs, as this
// node's replica shows it; before that it returns c unchanged (nodes of
// the previous release cannot read a Session) and a zero id.
func (b *netBackend) withRequestID(c ledger.Command, id ledger.RequestID) (ledger.Command, ledger.RequestID) {
	if !b.fsm.State().VersionActive(ledger.VersionRequestIDs) {
		return c, ledger.RequestID{}
	}
	if id.IsZero() {
		id = ledger.NewRequestID()
	}
	return ledger.Session{ID: id, Command: c}, id
}

func (b *netBackend) propose(ctx context.Context, tok Token, typ string, payload []byte, id ledger.RequestID) (Applied, error) {
	c, id := b.withRequestID(ledger.App{Shard: tok.Shard, Epoch: tok.Epoch, Type: typ, Payload: payload, Now: time.Now().UnixNano()}, id)
	var r ledger.Result
	var err error
	if id.IsZero() {
		// Cluster version 1: no request id, so no retry (it could apply
		// the command twice).
		r, err = b.commit(ctx, c)
	} else {
		// A retry with the same id is applied at most once: the ledger
		// answers it with the first application's result.
		r, err = b.commitRetry(ctx, c, nil)
	}
	a := Applied{Index: r.Index, RequestID: id, Replayed: r.Replayed}
	if err != nil {
		return a, err
	}
	a.Result = r.Response
	return a, nil
}

func (b *netBackend) versionActive(v uint32) bool { return b.fsm.State().VersionActive(v) }

// readBarrier asks the control-group leader for a read index and waits
// until this node's replica applied it (the wait lease renewals use).
// Before cluster version 5 the leader does not offer read indexes.
func (b *netBackend) readBarrier(ctx context.Context) error {
	if v := b.fsm.State().ActiveVersion(); v < ledger.VersionJobsAPI {
		return fmt.Errorf("%w: consistent reads need cluster version %d, the cluster runs %d", ErrUnsupported, ledger.VersionJobsAPI, v)
	}
	backoff := 5 * time.Millisecond
	for {
		idx, err := b.ctl.ReadIndex(ctx)
		if err == nil {
			return b.fsm.WaitApplied(ctx, idx)
		}
		if errors.Is(err, cluster.ErrUnauthorized) {
			return fmt.Errorf("%w: %w", ErrUnauthorized, err)
		}
		// No leader, a leader change, a lost confirm round: no barrier
		// yet; ask again (the current leader) until ctx ends.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: read barrier: %w (last: %w)", ErrNoQuorum, ctx.Err(), err)
		case <-b.ctx.Done():
			return ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, b.timing.RenewEvery)
	}
}
