package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/node"
)

// fencedFake keeps a policy as the control group would: inactive until
// active is set, then every committed range is merged in.
type fencedFake struct {
	mu      sync.Mutex
	active  bool
	noQuora int // SetFencedTakeover calls that fail with ErrNoQuorum first
	ranges  []node.ShardRange
	sets    int
	parts   uint32
}

func (f *fencedFake) FencedShards() ([]node.ShardRange, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ranges), nil
}

func (f *fencedFake) SetFencedTakeover(_ context.Context, first, last uint32, fenced bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets++
	switch {
	case !f.active:
		return node.ErrVersionInactive
	case last >= f.parts:
		return fmt.Errorf("%w: shard %d", node.ErrInvalid, last)
	case f.noQuora > 0:
		f.noQuora--
		return node.ErrNoQuorum
	}
	// One shard per range keeps the fake simple and the ranges sorted.
	for s := first; s <= last; s++ {
		if !rangeCovered(f.ranges, node.ShardRange{First: s, Last: s}) {
			f.ranges = append(f.ranges, node.ShardRange{First: s, Last: s})
		}
	}
	slices.SortFunc(f.ranges, func(a, b node.ShardRange) int { return int(a.First) - int(b.First) })
	return nil
}

func TestRangeCovered(t *testing.T) {
	have := []node.ShardRange{{First: 0, Last: 3}, {First: 4, Last: 7}, {First: 10, Last: 10}}
	for _, c := range []struct {
		r    node.ShardRange
		want bool
	}{
		{node.ShardRange{First: 0, Last: 7}, true},
		{node.ShardRange{First: 2, Last: 5}, true},
		{node.ShardRange{First: 10, Last: 10}, true},
		{node.ShardRange{First: 7, Last: 8}, false},
		{node.ShardRange{First: 9, Last: 10}, false},
		{node.ShardRange{First: 11, Last: 11}, false},
	} {
		if got := rangeCovered(have, c.r); got != c.want {
			t.Errorf("rangeCovered(%v, %v) = %v, want %v", have, c.r, got, c.want)
		}
	}
	if !rangeCovered([]node.ShardRange{{First: 0, Last: ^uint32(0)}}, node.ShardRange{First: 5, Last: ^uint32(0)}) {
		t.Error("the whole uint32 range does not cover its tail")
	}
}

// TestEnsureFenced: the agent waits for the cluster version, retries
// through a lost quorum, commits only what is not under the policy yet,
// and stops with the error of a range the cluster refuses.
func TestEnsureFenced(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	want := []node.ShardRange{{First: 0, Last: 3}, {First: 8, Last: 8}}
	synctest.Test(t, func(t *testing.T) {
		f := &fencedFake{parts: 16, noQuora: 2}
		done := make(chan error, 1)
		go func() { done <- ensureFenced(t.Context(), f, want, time.Second, log) }()
		time.Sleep(10 * time.Second) // virtual: the version is not active yet
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned %v before the version was active", err)
		default:
		}
		f.mu.Lock()
		f.active = true
		f.mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, r := range want {
			if !rangeCovered(f.ranges, r) {
				t.Fatalf("%v not under the policy: %v", r, f.ranges)
			}
		}
		// Again: nothing is committed twice.
		before := f.sets
		if err := ensureFenced(t.Context(), f, want, time.Second, log); err != nil || f.sets != before {
			t.Fatalf("second run: %v, %d commits", err, f.sets-before)
		}
		// A range past the last shard is refused, not retried forever.
		if err := ensureFenced(t.Context(), f, []node.ShardRange{{First: 15, Last: 16}}, time.Second, log); !errors.Is(err, node.ErrInvalid) {
			t.Fatalf("range past the last shard: %v", err)
		}
		// ctx ends the wait.
		f.active = false
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := ensureFenced(ctx, f, []node.ShardRange{{First: 12, Last: 12}}, time.Second, log); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("inactive until ctx ends: %v", err)
		}
	})
}
