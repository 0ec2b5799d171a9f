package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/s4check"
	"github.com/tenurehq/tenure/internal/benchkit"
)

// foRunResult is one run's outcome.
type foRunResult struct {
	samples   []float64 // ms
	commit    time.Duration
	restart   time.Duration
	drainCall time.Duration
	phases    []handoffPhases // drain mode
	overlap   bool
	line      string
	role      string // the victim's control-group role: leader, voter or member
}

func (c *foCluster) oneRun(ctx context.Context, rec *foRecorder, rng *rand.Rand) (foRunResult, error) {
	var res foRunResult
	sh, err := c.shards(ctx, "")
	if err != nil {
		return res, err
	}
	target := sh[rng.IntN(len(sh))]
	owner := c.agent(target.Owner)
	if owner == nil {
		return res, fmt.Errorf("shard %d owned by unknown node %q", target.Shard, target.Owner)
	}
	if c.opts.mode == "drain" {
		return c.drainRun(ctx, rec, owner, sh)
	}
	// A random phase of the owner's lease: its renewals are periodic, so a
	// delay uniform over one lease hits every phase of the renewal cycle.
	phase := time.Duration(rng.Int64N(int64(c.opts.lease)))
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(phase):
	}
	res.role = c.role(ctx, owner.id)
	killedAt := time.Now()
	owner.kill()
	// Commit: poll a survivor's API for the new epoch.
	// The poller owns commit and commitErr until it closes commitDone.
	var commit time.Duration
	var commitErr error
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		deadline := killedAt.Add(2 * time.Minute)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			var s foShard
			for _, a := range c.agents {
				if a == owner || !a.running() {
					continue
				}
				if err := c.get(ctx, a, fmt.Sprintf("/v1/shards/%d", target.Shard), &s); err == nil && s.Epoch > target.Epoch {
					commit = time.Since(killedAt)
					return
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		commitErr = fmt.Errorf("shard %d: no epoch above %d committed within 2m", target.Shard, target.Epoch)
	}()
	restartAt := killedAt
	if c.opts.mode == "restart" {
		if c.opts.down > 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(c.opts.down):
			}
			restartAt = time.Now()
		}
		if err := c.spawn(owner); err != nil {
			return res, err
		}
		for time.Since(restartAt) < time.Minute {
			if err := c.get(ctx, owner, "/healthz", nil); err == nil {
				res.restart = time.Since(restartAt)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Acting: the first witness tick at a higher epoch (ticks arrive in
	// batches, so wait for it; its timestamp is when it happened). After
	// -down, the restarted agent's first tick on any shard.
	var first s4check.Tick
	var found bool
	deadline := time.Now().Add(2 * time.Minute)
	for !found {
		if time.Now().After(deadline) {
			if c.opts.down > 0 {
				return res, fmt.Errorf("restarted %s: no tick within 2m (agent logs in %s)", owner.id, c.dir)
			}
			return res, fmt.Errorf("shard %d: no tick above epoch %d within 2m of the kill (agent logs in %s)", target.Shard, target.Epoch, c.dir)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if c.opts.down > 0 {
			first, found = rec.firstBy(owner.id, restartAt.UnixNano())
		} else {
			first, _, found, _ = handoff(rec.shard(target.Shard), owner.id, target.Epoch)
		}
	}
	<-commitDone
	if commitErr != nil {
		return res, commitErr
	}
	res.commit = commit
	_, last, _, overlap := handoff(rec.shard(target.Shard), owner.id, target.Epoch)
	res.overlap = overlap
	acting := time.Duration(first.UnixNano - restartAt.UnixNano())
	res.samples = []float64{ms(acting)}
	if c.opts.down > 0 {
		res.line = fmt.Sprintf("shard %3d  %s@e%d (%-6s)  kill -9 → commit %7.1f ms; down %v, restart → acting (shard %d @e%d) %7.1f ms  (agent up after %.0f ms)",
			target.Shard, owner.id, target.Epoch, res.role, ms(res.commit), c.opts.down, first.Shard, first.Epoch, ms(acting), ms(res.restart))
	} else {
		res.line = fmt.Sprintf("shard %3d  %s@e%d (%-6s)  phase %5.0f ms  kill -9 → commit %7.1f ms, → %s acting @e%d %7.1f ms",
			target.Shard, owner.id, target.Epoch, res.role, ms(phase), ms(res.commit), first.Node, first.Epoch, ms(acting))
	}
	if c.opts.mode == "restart" && c.opts.down == 0 {
		res.line += fmt.Sprintf("  (restarted agent up after %.0f ms)", ms(res.restart))
	}
	if overlap {
		res.line += fmt.Sprintf("  OVERLAP: old owner ticked %.1f ms after the successor started", ms(time.Duration(last-first.UnixNano)))
	}
	if c.opts.mode == "crash" {
		// Bring the node back for the next run (same identity and data).
		if err := c.spawn(owner); err != nil {
			return res, err
		}
	}
	return res, nil
}

// drainRun drains owner, measures the handoff gap and overlap of every shard
// it held, then undrains it.
func (c *foCluster) drainRun(ctx context.Context, rec *foRecorder, owner *foAgent, sh []foShard) (foRunResult, error) {
	var res foRunResult
	var held []foShard
	for _, s := range sh {
		if s.Owner == owner.id {
			held = append(held, s)
		}
	}
	leader := c.leaderAgent(ctx)
	t0 := time.Now()
	if err := c.post(ctx, owner, "/v1/drain?wait=60s"); err != nil {
		return res, err
	}
	res.drainCall = time.Since(t0)
	// Wait for the witness to report a successor for every held shard.
	deadline := time.Now().Add(time.Minute)
	var gaps []float64
	overlaps := 0
	for {
		gaps, overlaps = gaps[:0], 0
		all := true
		for _, s := range held {
			first, last, found, overlap := handoff(rec.shard(s.Shard), owner.id, s.Epoch)
			if !found {
				all = false
				break
			}
			gaps = append(gaps, ms(time.Duration(first.UnixNano-last)))
			if overlap {
				overlaps++
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("drain of %s: not every shard had a new owner ticking within 1m", owner.id)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	res.samples, res.overlap = gaps, overlaps > 0
	for _, s := range held {
		first, last, _, _ := handoff(rec.shard(s.Shard), owner.id, s.Epoch)
		if p, ok := c.phasesOf(ctx, leader, s.Shard, last, first); ok {
			res.phases = append(res.phases, p)
		}
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	res.line = fmt.Sprintf("drain %s (%d shards): POST took %.0f ms; handoff gap max %.1f ms, p50 %.1f ms; overlapping shards %d",
		owner.id, len(held), ms(res.drainCall), benchkit.NearestRank(sorted, 1), benchkit.NearestRank(sorted, 0.5), overlaps)
	if err := c.post(ctx, owner, "/v1/undrain"); err != nil {
		return res, err
	}
	return res, nil
}
