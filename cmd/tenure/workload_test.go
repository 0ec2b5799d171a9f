package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type fixedOwned struct {
	mu    sync.Mutex
	owned []ownedShard
}

func (f *fixedOwned) Owned() []ownedShard {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ownedShard(nil), f.owned...)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-time.After(10 * time.Millisecond)
	}
}

func TestWorkloadReportsToWitness(t *testing.T) {
	checker := newWitnessChecker()
	var posts sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Store(r.Header.Get("Content-Type"), true)
		checker.ServeHTTP(w, r)
	}))
	defer srv.Close()
	m := newAgentMetrics()
	wit := newWitness(srv.URL, slog.New(slog.DiscardHandler), m)
	src := &fixedOwned{owned: []ownedShard{{1, 4}, {2, 7}}}
	wl := &workload{src: src, node: "n1", every: 5 * time.Millisecond, witness: wit, metrics: m}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); wl.run(ctx) }()
	go func() { defer wg.Done(); wit.run(ctx) }()
	waitFor(t, 20*time.Second, "ticks of both shards", func() bool {
		return len(checker.ticksOf(1)) >= 3 && len(checker.ticksOf(2)) >= 3
	})
	cancel()
	wg.Wait()
	if _, ok := posts.Load("application/json"); !ok {
		t.Fatal("witness did not POST application/json")
	}
	ts := checker.ticksOf(2)
	if ts[0].Node != "n1" || ts[0].Epoch != 7 || ts[0].UnixNano == 0 {
		t.Fatalf("tick: %+v", ts[0])
	}
	for i := 1; i < len(ts); i++ {
		if ts[i].Seq <= ts[i-1].Seq {
			t.Fatalf("seq not increasing: %+v then %+v", ts[i-1], ts[i])
		}
	}
	if r := checker.check(10); len(r.Violations) != 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
	if wit.dropped.Load() != 0 {
		t.Fatalf("dropped %d", wit.dropped.Load())
	}
}

func TestWitnessNeverBlocks(t *testing.T) {
	// A witness nobody drains: record must drop, not block.
	wit := newWitness("http://127.0.0.1:1/", slog.New(slog.DiscardHandler), nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range witnessBuffer + 100 {
			wit.record(tick{Seq: uint64(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("record blocked")
	}
	if got := wit.dropped.Load(); got != 100 {
		t.Fatalf("dropped %d, want 100", got)
	}
	// A failing POST drops its batch and counts it.
	wit.flush(context.Background())
	if got := wit.dropped.Load(); got != 100+witnessBuffer {
		t.Fatalf("after failed post dropped %d", got)
	}
}

func TestWitnessCheckerFindsOverlap(t *testing.T) {
	c := newWitnessChecker()
	c.add([]tick{
		{Shard: 1, Epoch: 1, Node: "a", UnixNano: 100},
		{Shard: 1, Epoch: 2, Node: "b", UnixNano: 300},
		{Shard: 1, Epoch: 1, Node: "a", UnixNano: 200},
		{Shard: 2, Epoch: 5, Node: "a", UnixNano: 100},
		{Shard: 2, Epoch: 6, Node: "b", UnixNano: 200},
	})
	if r := c.check(10); len(r.Violations) != 0 || r.Ticks != 5 || r.Shards != 2 {
		t.Fatalf("clean history flagged: %+v", r)
	}
	c.add([]tick{
		{Shard: 1, Epoch: 1, Node: "a", UnixNano: 350}, // stale owner after b started
		{Shard: 2, Epoch: 6, Node: "c", UnixNano: 250}, // two nodes, one epoch
	})
	r := c.check(10)
	if len(r.Violations) != 2 || !strings.Contains(r.Violations[0], "shard 1: a acted at epoch 1") || !strings.Contains(r.Violations[1], "b and c both acted at epoch 6") {
		t.Fatalf("violations: %q", r.Violations)
	}
}

func TestWitnessCheckerHTTP(t *testing.T) {
	c := newWitnessChecker()
	srv := httptest.NewServer(c)
	defer srv.Close()
	for _, tc := range []struct {
		method, body string
		code         int
	}{
		{"POST", `[{"shard":1,"epoch":2,"node":"a","seq":1,"unix_nano":5}]`, 204},
		{"POST", `{"shard":1,"epoch":2,"node":"a","seq":2,"unix_nano":6}`, 204},
		{"POST", `[{"shard":"x"}]`, 400},
		{"POST", `{`, 400},
		{"GET", ``, 405},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("%s %s: %d, want %d", tc.method, tc.body, resp.StatusCode, tc.code)
		}
	}
	if n := len(c.ticksOf(1)); n != 2 {
		t.Fatalf("stored %d ticks", n)
	}
}

func TestWitnessCommand(t *testing.T) {
	var out syncBuffer
	m := &Main{Stdout: &out, Stderr: &out}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, []string{"witness", "--listen", "127.0.0.1:0", "--report", "1h"}) }()
	var url string
	waitFor(t, 10*time.Second, "the witness to listen", func() bool {
		s := out.String()
		i := strings.Index(s, "http://")
		if i < 0 {
			return false
		}
		url = strings.Fields(s[i:])[0]
		return true
	})
	post := func(body string) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post(`[{"shard":1,"epoch":1,"node":"a","seq":1,"unix_nano":10},{"shard":1,"epoch":2,"node":"b","seq":1,"unix_nano":20}]`)
	post(`[{"shard":1,"epoch":1,"node":"a","seq":2,"unix_nano":30}]`)
	cancel()
	err := <-done
	if err == nil || !strings.Contains(out.String(), "final: 3 ticks on 1 shards, 1 violations") || !strings.Contains(out.String(), "a acted at epoch 1") {
		t.Fatalf("err %v, output:\n%s", err, out.String())
	}
}

// flipOwned answers Owned with a different set on every call.
type flipOwned struct{ calls [][]ownedShard }

func (f *flipOwned) Owned() []ownedShard {
	out := f.calls[0]
	f.calls = f.calls[1:]
	return out
}

func TestWorkloadTicksOnlyShardsActingAroundTheTick(t *testing.T) {
	wit := newWitness("http://unused", slog.New(slog.DiscardHandler), nil)
	src := &flipOwned{calls: [][]ownedShard{
		{{1, 1}, {2, 5}, {3, 7}}, // before the timestamp
		{{1, 1}, {2, 6}, {4, 1}}, // after: 2 moved to a new epoch, 3 lost, 4 gained
	}}
	wl := &workload{src: src, node: "n1", witness: wit}
	wl.tickOnce()
	close(wit.ticks)
	var got []tick
	for tk := range wit.ticks {
		got = append(got, tk)
	}
	if len(got) != 1 || got[0].Shard != 1 || got[0].Epoch != 1 {
		t.Fatalf("ticks %+v, want only shard 1 at epoch 1", got)
	}
}

// With sample below every, the witness gets every k-th sample of a stretch
// plus its first and last sample, so a stretch's end is seen to within a
// sample, not a report period.
func TestWorkloadReportsStretchEdges(t *testing.T) {
	wit := newWitness("http://unused", slog.New(slog.DiscardHandler), nil)
	a := []ownedShard{{1, 1}}
	b := []ownedShard{{1, 2}}
	var calls [][]ownedShard
	// Samples (two Owned calls each): 7 at epoch 1, 1 with nothing, 2 at epoch 2.
	for range 7 {
		calls = append(calls, a, a)
	}
	calls = append(calls, nil, nil)
	calls = append(calls, b, b, b, b)
	src := &flipOwned{calls: calls}
	wl := &workload{src: src, node: "n1", every: 10 * time.Millisecond, sample: 3 * time.Millisecond, witness: wit}
	// every/sample = 3: samples 0, 3, 6 of a stretch are reported, and the
	// last one when the stretch ends.
	for range 10 {
		wl.tickOnce()
	}
	close(wit.ticks)
	var got []uint64
	for tk := range wit.ticks {
		got = append(got, tk.Seq*10+tk.Epoch)
	}
	// Seqs 1..7 at epoch 1 (1, 4, 7 reported; 7 is also the last), 8..9 at epoch 2 (8 first; 9 held).
	want := []uint64{11, 41, 71, 82}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("reported seq*10+epoch %v, want %v", got, want)
	}
	// The held last sample of epoch 2 goes out once the stretch ends.
	wit2 := newWitness("http://unused", slog.New(slog.DiscardHandler), nil)
	wl.witness = wit2
	wl.src = &flipOwned{calls: [][]ownedShard{nil, nil}}
	wl.tickOnce()
	close(wit2.ticks)
	got = got[:0]
	for tk := range wit2.ticks {
		got = append(got, tk.Seq*10+tk.Epoch)
	}
	if fmt.Sprint(got) != "[92]" {
		t.Fatalf("after the stretch ended: %v, want [92]", got)
	}
}
