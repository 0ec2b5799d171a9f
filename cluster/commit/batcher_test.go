package commit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// fsmApplier applies straight to an FSM, one log index per entry. While
// gate is non-nil, each Apply first waits for a value from it.
type fsmApplier struct {
	mu      sync.Mutex
	f       *ledger.FSM
	index   uint64
	entries int
	sizes   []int
	gate    chan struct{}
	err     error
	waiting atomic.Int64 // commands in the entry waiting at the gate
}

func (a *fsmApplier) Apply(ctx context.Context, data []byte) (ledger.Result, error) {
	if a.gate != nil {
		if c, err := ledger.Decode(data); err == nil {
			n := int64(1)
			if b, ok := c.(ledger.Batch); ok {
				n = int64(len(b.Commands))
			}
			a.waiting.Store(n)
		}
		select {
		case <-a.gate:
		case <-ctx.Done():
			return ledger.Result{}, ctx.Err()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return ledger.Result{}, a.err
	}
	c, err := ledger.Decode(data)
	if err != nil {
		return ledger.Result{Err: err}, nil
	}
	a.index++
	a.entries++
	n := 1
	if b, ok := c.(ledger.Batch); ok {
		n = len(b.Commands)
	}
	a.sizes = append(a.sizes, n)
	return a.f.ApplyCommand(a.index, c), nil
}

func TestBatcherGroupsAndDemultiplexes(t *testing.T) {
	f, _ := newTestFSM(t, ledger.DefaultConfig())
	a := &fsmApplier{f: f, gate: make(chan struct{})}
	b, err := NewBatcher(a, BatcherConfig{MaxCommands: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k", i)
			r, err := b.Apply(context.Background(), ledger.JobEnqueue{Shard: uint32(i % 3), Key: key})
			switch {
			case err != nil:
				errs <- err
			case r.Err != nil:
				errs <- r.Err
			case r.Job.Key != key || r.Job.Shard != uint32(i%3):
				errs <- fmt.Errorf("command %d got the result of another: %+v", i, r.Job)
			}
		}()
	}
	// Wait until every command is either in the entry held at the gate, the
	// one the loop holds while it waits for a slot, or queued; then let
	// entries through one at a time: the queued ones group up.
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	for a.waiting.Load()+int64(len(b.reqs))+1 < n {
		if time.Now().After(deadline) {
			t.Fatalf("commands did not queue: %d at the gate, %d queued", a.waiting.Load(), len(b.reqs))
		}
		<-tick.C
	}
	tick.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case a.gate <- struct{}{}:
			continue
		case <-done:
		}
		break
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if f.State().NumJobs() != n {
		t.Fatalf("%d jobs, want %d", f.State().NumJobs(), n)
	}
	if a.entries > 1+(n+63)/64 { // the held entry, then full entries of 64
		t.Fatalf("%d commands took %d entries: not grouped", n, a.entries)
	}
	for _, s := range a.sizes {
		if s > 64 {
			t.Fatalf("entry of %d commands exceeds MaxCommands 64", s)
		}
	}
	t.Logf("%d commands in %d entries: %v", n, a.entries, a.sizes)
}

func TestBatcherErrorsAndClose(t *testing.T) {
	f, _ := newTestFSM(t, ledger.DefaultConfig())
	lost := errors.New("leadership lost")
	a := &fsmApplier{f: f, err: lost}
	b, err := NewBatcher(a, BatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Apply(context.Background(), ledger.Heartbeat{Node: "a"}); !errors.Is(err, lost) {
		t.Fatalf("applier error: %v", err)
	}
	if _, err := b.Apply(context.Background(), ledger.Batch{}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("nested batch: %v", err)
	}
	if _, err := b.Apply(context.Background(), ledger.App{Payload: make([]byte, DefaultBatchMaxBytes)}); !errors.Is(err, ledger.ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Apply(ctx, ledger.Heartbeat{Node: "a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	b.Close()
	if _, err := b.Apply(context.Background(), ledger.Heartbeat{Node: "a"}); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if _, err := NewBatcher(a, BatcherConfig{MaxCommands: -1}); err == nil {
		t.Fatal("negative MaxCommands accepted")
	}
	if _, err := NewBatcher(nil, BatcherConfig{}); err == nil {
		t.Fatal("nil applier accepted")
	}
}

func TestBatcherLinger(t *testing.T) {
	f, _ := newTestFSM(t, ledger.DefaultConfig())
	a := &fsmApplier{f: f}
	b, err := NewBatcher(a, BatcherConfig{Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r, err := b.Apply(context.Background(), ledger.Heartbeat{Node: "a", Incarnation: 1}); err != nil || r.Err != nil || r.Node.Liveness != 1 {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestBatcherApplyEncoded(t *testing.T) {
	f, _ := newTestFSM(t, ledger.DefaultConfig())
	b, err := NewBatcher(&fsmApplier{f: f}, BatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if r, err := b.ApplyEncoded(ctx, ledger.MustEncode(ledger.Heartbeat{Node: "a", Incarnation: 1})); err != nil || r.Node.Liveness != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	r, err := b.ApplyEncoded(ctx, ledger.MustEncode(ledger.Batch{Commands: []ledger.Command{
		ledger.Heartbeat{Node: "b", Incarnation: 1}, ledger.ExpireNode{Node: "zz"}, ledger.Heartbeat{Node: "c", Incarnation: 1},
	}}))
	if err != nil || len(r.Results) != 3 || r.Results[0].Node.ID != "b" || !errors.Is(r.Results[1].Err, ledger.ErrUnknownNode) || r.Results[2].Node.ID != "c" {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := b.ApplyEncoded(ctx, []byte{1}); !errors.Is(err, ledger.ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
}

// stuckApplier hangs its first entry until the entry's context ends, as a
// commit forwarded to a leader whose host vanished does; later entries
// commit at once.
type stuckApplier struct {
	calls       atomic.Int64
	hadDeadline atomic.Bool
}

func (a *stuckApplier) Apply(ctx context.Context, data []byte) (ledger.Result, error) {
	if a.calls.Add(1) == 1 {
		_, ok := ctx.Deadline()
		a.hadDeadline.Store(ok)
		<-ctx.Done()
		return ledger.Result{}, ctx.Err()
	}
	return ledger.Result{Index: uint64(a.calls.Load())}, nil
}

// An entry whose every caller gave up releases its in-flight slot: the
// next command is not stuck behind it.
func TestBatcherReleasesAbandonedEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &stuckApplier{}
		b, err := NewBatcher(a, BatcherConfig{MaxInFlight: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := b.Apply(ctx, ledger.Heartbeat{Node: "a"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stuck entry: %v, want DeadlineExceeded", err)
		}
		if !a.hadDeadline.Load() {
			t.Error("the entry's context carried no deadline although its only command had one")
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		r, err := b.Apply(ctx2, ledger.Heartbeat{Node: "a"})
		if err != nil || r.Index != 2 {
			t.Fatalf("next command after an abandoned entry: %+v, %v", r, err)
		}
		// A caller without a deadline that cancels also releases the slot.
		ctx3, cancel3 := context.WithCancel(context.Background())
		a.calls.Store(0)
		done := make(chan error, 1)
		go func() { _, err := b.Apply(ctx3, ledger.Heartbeat{Node: "a"}); done <- err }()
		synctest.Wait()
		cancel3()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller: %v", err)
		}
		if r, err := b.Apply(ctx2, ledger.Heartbeat{Node: "a"}); err != nil || r.Index != 2 {
			t.Fatalf("next command after a cancelled entry: %+v, %v", r, err)
		}
	})
}

// orderApplier records the commands of every entry, in log order.
type orderApplier struct {
	fsmApplier
	order []string
}

func (a *orderApplier) Apply(ctx context.Context, data []byte) (ledger.Result, error) {
	c, err := ledger.Decode(data)
	if err != nil {
		return ledger.Result{}, err
	}
	cmds := []ledger.Command{c}
	if b, ok := c.(ledger.Batch); ok {
		cmds = b.Commands
	}
	a.mu.Lock()
	for _, sc := range cmds {
		a.order = append(a.order, sc.(ledger.JobEnqueue).Key)
	}
	a.mu.Unlock()
	return a.fsmApplier.Apply(ctx, data)
}

// TestBatcherApplyAllKeepsOrder: ApplyAll's commands reach the log in the
// given order, across entries, each with its own result.
func TestBatcherApplyAllKeepsOrder(t *testing.T) {
	f, _ := newTestFSM(t, ledger.DefaultConfig())
	a := &orderApplier{fsmApplier: fsmApplier{f: f}}
	b, err := NewBatcher(a, BatcherConfig{MaxCommands: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 100
	cmds := make([]ledger.Command, n)
	for i := range cmds {
		cmds[i] = ledger.JobEnqueue{Shard: uint32(i % 3), Key: fmt.Sprint("k", i)}
	}
	res, errs := b.ApplyAll(context.Background(), cmds)
	for i := range cmds {
		if errs[i] != nil || res[i].Err != nil {
			t.Fatalf("command %d: %v %v", i, errs[i], res[i].Err)
		}
		if res[i].Job.Key != cmds[i].(ledger.JobEnqueue).Key {
			t.Fatalf("command %d got the result of another: %+v", i, res[i].Job)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, k := range a.order {
		if k != cmds[i].(ledger.JobEnqueue).Key {
			t.Fatalf("log order %v, want the given order", a.order)
		}
	}
	if len(a.order) != n {
		t.Fatalf("%d commands in the log, want %d", len(a.order), n)
	}
}

// ApplyAll's commands go out together: in one entry when they fit (even
// with a slot free the moment the first arrives, where Apply calls made one
// after another could go out one per entry), split only by MaxCommands.
func TestBatcherApplyAllOneEntry(t *testing.T) {
	for _, tc := range []struct {
		max, n int
		want   []int
	}{
		{max: 16, n: 6, want: []int{6}},
		{max: 4, n: 10, want: []int{4, 4, 2}},
	} {
		f, _ := newTestFSM(t, ledger.DefaultConfig())
		a := &fsmApplier{f: f}
		b, err := NewBatcher(a, BatcherConfig{MaxCommands: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		cmds := make([]ledger.Command, tc.n)
		for i := range cmds {
			cmds[i] = ledger.JobEnqueue{Shard: uint32(i % 3), Key: fmt.Sprint("k", i)}
		}
		for round := range 20 {
			a.mu.Lock()
			a.sizes = nil
			a.mu.Unlock()
			for i := range cmds {
				cmds[i] = ledger.JobEnqueue{Shard: uint32(i % 3), Key: fmt.Sprint("r", round, "k", i)}
			}
			res, errs := b.ApplyAll(context.Background(), cmds)
			for i := range cmds {
				if errs[i] != nil || res[i].Err != nil || res[i].Job.Key != cmds[i].(ledger.JobEnqueue).Key {
					t.Fatalf("max %d round %d command %d: %v %v %+v", tc.max, round, i, errs[i], res[i].Err, res[i].Job)
				}
			}
			a.mu.Lock()
			got := fmt.Sprint(a.sizes)
			a.mu.Unlock()
			if got != fmt.Sprint(tc.want) {
				t.Fatalf("max %d round %d: entry sizes %s, want %v", tc.max, round, got, tc.want)
			}
		}
		b.Close()
	}
}

// TestBatcherApplyEncodedOrder: a batch forwarded from a follower commits
// in the order it was sent, even when every command goes out in its own
// entry (MaxCommands 1) — submitted concurrently, they would not.
func TestBatcherApplyEncodedOrder(t *testing.T) {
	f, _ := newTestFSM(t, ledger.DefaultConfig())
	a := &orderApplier{fsmApplier: fsmApplier{f: f}}
	b, err := NewBatcher(a, BatcherConfig{MaxCommands: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for round := range 5 {
		var cmds []ledger.Command
		var want []string
		for i := range 64 {
			k := fmt.Sprintf("r%d-k%02d", round, i)
			cmds = append(cmds, ledger.JobEnqueue{Shard: uint32(i % 3), Key: k})
			want = append(want, k)
		}
		a.mu.Lock()
		a.order = nil
		a.mu.Unlock()
		r, err := b.ApplyEncoded(context.Background(), ledger.MustEncode(ledger.Batch{Commands: cmds}))
		if err != nil || len(r.Results) != len(cmds) {
			t.Fatalf("round %d: %d results, %v", round, len(r.Results), err)
		}
		for i, res := range r.Results {
			if res.Err != nil || res.Job.Key != want[i] {
				t.Fatalf("round %d: command %d got %+v (%v), want job %s", round, i, res.Job, res.Err, want[i])
			}
		}
		a.mu.Lock()
		got := slices.Clone(a.order)
		a.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: committed in the order %v, want %v", round, got, want)
		}
	}
}

func newTestFSM(t interface{ Fatal(...any) }, cfg ledger.Config) (*ledger.FSM, struct{}) {
	f, err := ledger.NewFSM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, struct{}{}
}
