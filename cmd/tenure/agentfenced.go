package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tenurehq/tenure/node"
)

// The agent's opt-in to fenced takeover (docs/guarantees.md: S4 waived for
// these shards): --fenced-shards 0-63,128 (TENURE_FENCED_SHARDS, config key
// "fenced-shards"). Once the cluster runs a version with fenced takeover,
// the agent commits the policy for every listed shard not under it yet.
// It only adds: taking shards back is `tenure fenced --unset F-L`, after
// removing them from every agent's setting (or the next start puts them
// back).

// maxFencedRanges bounds the ranges --fenced-shards may list.
const maxFencedRanges = 1024

// shardRangesFlag is a comma-separated list of shards and shard ranges
// ("0-63,128").
type shardRangesFlag []node.ShardRange

func (f *shardRangesFlag) String() string {
	parts := make([]string, len(*f))
	for i, r := range *f {
		parts[i] = fmt.Sprint(r.First)
		if r.Last != r.First {
			parts[i] += fmt.Sprintf("-%d", r.Last)
		}
	}
	return strings.Join(parts, ",")
}

func (f *shardRangesFlag) Set(v string) error {
	var out []node.ShardRange
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		if len(out) == maxFencedRanges {
			return fmt.Errorf("more than %d ranges", maxFencedRanges)
		}
		first, last, err := parseShardRange(part)
		if err != nil {
			return err
		}
		out = append(out, node.ShardRange{First: first, Last: last})
	}
	*f = out
	return nil
}

// fencedNode is the part of a running node that keeps the fenced-takeover
// policy (*node.Node).
type fencedNode interface {
	FencedShards() ([]node.ShardRange, error)
	SetFencedTakeover(ctx context.Context, first, last uint32, fenced bool) error
}

// rangeCovered reports whether every shard of r is in one of rs (disjoint
// ranges sorted by First, as node.FencedShards returns them).
func rangeCovered(rs []node.ShardRange, r node.ShardRange) bool {
	next := uint64(r.First)
	for _, c := range rs {
		if uint64(c.First) <= next && next <= uint64(c.Last) {
			next = uint64(c.Last) + 1
		}
		if next > uint64(r.Last) {
			return true
		}
	}
	return false
}

// ensureFenced commits the fenced-takeover policy for every range of want
// not under it yet, retrying every retry (doubling up to 16×) while the
// cluster version does not have it or there is no quorum, until each is
// or ctx ends. It returns nil when all are, ctx's error, or the error of a
// range the cluster refuses (node.ErrInvalid: shards that do not exist).
func ensureFenced(ctx context.Context, n fencedNode, want []node.ShardRange, retry time.Duration, log *slog.Logger) error {
	wait := retry
	waitedForVersion := false
	for {
		have, err := n.FencedShards()
		if err != nil {
			return fmt.Errorf("fenced-shards: %w", err)
		}
		var failed error
		for _, r := range want {
			if rangeCovered(have, r) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := n.SetFencedTakeover(cctx, r.First, r.Last, true)
			cancel()
			switch {
			case err == nil:
				log.Warn("fenced takeover on: these shards move to a successor as soon as their owner is detected dead, without waiting out its lease; only the fencing token keeps a stale owner's writes out (S4 waived)",
					"first", r.First, "last", r.Last)
				continue
			case errors.Is(err, node.ErrInvalid):
				return fmt.Errorf("fenced-shards %d-%d: %w", r.First, r.Last, err)
			case errors.Is(err, node.ErrVersionInactive):
				if !waitedForVersion {
					log.Info("fenced-shards: waiting for the cluster version with fenced takeover (tenure upgrade status)", "err", err)
					waitedForVersion = true
				}
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				log.Warn("fenced-shards: could not commit the policy yet; retrying", "first", r.First, "last", r.Last, "err", err, "retry_in", wait)
			}
			failed = err
			break
		}
		if failed == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 16*retry)
	}
}
