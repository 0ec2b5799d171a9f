package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// A commit the ledger refuses to encode is ErrInvalid, never ErrNoQuorum
// (which commitRetry retries until the caller gives up).
func TestMapControlErrInvalid(t *testing.T) {
	for _, cause := range []error{ledger.ErrTooLarge, ledger.ErrMalformed, ledger.ErrInvalid, ledger.ErrVersion} {
		err := mapControlErr(fmt.Errorf("batcher: %w", cause))
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, cause) || errors.Is(err, ErrNoQuorum) {
			t.Errorf("mapControlErr(%v) = %v, want ErrInvalid wrapping the cause", cause, err)
		}
		err = mapLedgerErr(fmt.Errorf("apply: %w", cause))
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, cause) {
			t.Errorf("mapLedgerErr(%v) = %v, want ErrInvalid wrapping the cause", cause, err)
		}
	}
	if err := mapControlErr(ownership.ErrLeadershipLost); !errors.Is(err, ErrNoQuorum) || errors.Is(err, ErrInvalid) {
		t.Errorf("leadership lost = %v, want ErrNoQuorum", err)
	}
	if err := mapControlErr(errors.New("connection refused")); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("transport error = %v, want ErrNoQuorum", err)
	}
}

// Over-long keys, types, election names and payloads fail at once with
// ErrInvalid on the real backend — through Enqueue's own check and through
// the commit path it guards (issue #12: a 4,097-byte key hung as "no quorum").
func TestRealBackendInvalidInputFailsFast(t *testing.T) {
	withSolo(t)
	ctx := testCtx(t)
	cfg := soloConfig(t, t.TempDir(), nil)
	cfg.MaxPendingJobs = 2
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if err := n.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", ledger.MaxStringLen+1)
	check := func(name string, f func(ctx context.Context) error) {
		t.Helper()
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := f(fctx)
		if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrNoQuorum) || fctx.Err() != nil {
			t.Errorf("%s = %v (ctx %v), want ErrInvalid at once", name, err, fctx.Err())
		}
	}
	check("Enqueue(4097-byte key)", func(ctx context.Context) error {
		_, _, err := n.Enqueue(ctx, JobSpec{Key: long, Type: "t"})
		return err
	})
	check("Enqueue(4097-byte type)", func(ctx context.Context) error {
		_, _, err := n.Enqueue(ctx, JobSpec{Key: "k", Type: long})
		return err
	})
	check("Enqueue(payload over the limit)", func(ctx context.Context) error {
		_, _, err := n.Enqueue(ctx, JobSpec{Key: "k", Type: "t", Payload: make([]byte, ledger.DefaultMaxPayload+1)})
		return err
	})
	// Behind Enqueue's check: the backend's retried commit.
	check("enqueueJob(4097-byte key)", func(ctx context.Context) error {
		_, _, err := n.be.enqueueJob(ctx, 0, JobSpec{Key: long, Type: "t"}, 0)
		return err
	})
	check("electionShard(4097-byte name)", func(ctx context.Context) error {
		_, err := n.be.electionShard(ctx, "g", long)
		return err
	})
	if err := ctx.Err(); err != nil {
		t.Fatal(err)
	}

	// The pending cap on the real backend.
	for i := range 2 {
		if _, created, err := n.Enqueue(ctx, JobSpec{Key: fmt.Sprint("job-", i), ShardKey: "tenant", Type: "t"}); err != nil || !created {
			t.Fatalf("enqueue %d: created %v, %v", i, created, err)
		}
	}
	if _, _, err := n.Enqueue(ctx, JobSpec{Key: "job-2", ShardKey: "tenant", Type: "t"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third enqueue = %v, want ErrQueueFull", err)
	}
	if j, created, err := n.Enqueue(ctx, JobSpec{Key: "job-0", ShardKey: "tenant", Type: "t"}); err != nil || created || j.Key != "job-0" {
		t.Fatalf("duplicate of a queued job while full: %+v created %v, %v", j, created, err)
	}
}

// MaxPendingJobs on the in-memory backend: full shards refuse new jobs,
// other shards and duplicates are unaffected, and a started job frees a slot.
func TestMaxPendingJobs(t *testing.T) {
	ctx := testCtx(t)
	net := NewMemNetwork()
	n := startMem(t, net, "a", func(c *Config) { c.MaxPendingJobs = 2 })
	if err := n.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	var jobs []Job
	for i := range 2 {
		j, created, err := n.Enqueue(ctx, JobSpec{Key: fmt.Sprint("j", i), ShardKey: "tenant", Type: "t"})
		if err != nil || !created {
			t.Fatalf("enqueue %d: %v %v", i, created, err)
		}
		jobs = append(jobs, j)
	}
	_, _, err := n.Enqueue(ctx, JobSpec{Key: "j2", ShardKey: "tenant", Type: "t"})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("enqueue on a full shard = %v, want ErrQueueFull", err)
	}
	if _, _, err := n.Enqueue(ctx, JobSpec{ShardKey: "tenant", Type: "t"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("keyless enqueue on a full shard = %v, want ErrQueueFull", err)
	}
	if _, created, err := n.Enqueue(ctx, JobSpec{Key: "j1", ShardKey: "tenant", Type: "t"}); err != nil || created {
		t.Fatalf("duplicate on a full shard: created %v, %v", created, err)
	}
	// Another shard is not full.
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("other-", i); n.ShardFor(k) != n.ShardFor("tenant") {
			other = k
		}
	}
	if _, _, err := n.Enqueue(ctx, JobSpec{Key: "x", ShardKey: other, Type: "t"}); err != nil {
		t.Fatalf("enqueue on another shard: %v", err)
	}
	tok, err := n.Token(jobs[0].Shard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.StartJob(ctx, tok, jobs[0]); err != nil {
		t.Fatal(err)
	}
	if _, created, err := n.Enqueue(ctx, JobSpec{Key: "j2", ShardKey: "tenant", Type: "t"}); err != nil || !created {
		t.Fatalf("enqueue after a start freed a slot: created %v, %v", created, err)
	}
	if err := (Config{MaxPendingJobs: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxPendingJobs") {
		t.Fatalf("Validate(MaxPendingJobs -1) = %v", err)
	}
}
