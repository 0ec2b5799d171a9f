package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestOnApplyAndWaitApplied(t *testing.T) {
	f, _ := newTestFSM(t, DefaultConfig())
	var seen []string
	f.OnApply(func(index uint64, c Command, r Result) {
		if f.State().AppliedIndex() < index {
			t.Errorf("hook for %d ran before State reached it", index)
		}
		seen = append(seen, fmt.Sprintf("%d:%v:%v", index, KindOf(c), r.Err == nil))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- f.WaitApplied(ctx, 2) }()
	f.ApplyCommand(1, Heartbeat{Node: "a", Incarnation: 1})
	f.ApplyCommand(2, Batch{Commands: []Command{Heartbeat{Node: "b", Incarnation: 1}, ExpireNode{Node: "zz"}}})
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	want := "[1:Heartbeat:true 2:Heartbeat:true 2:ExpireNode:false]"
	if got := fmt.Sprint(seen); got != want {
		t.Fatalf("hooks saw %s, want %s", got, want)
	}
	short, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := f.WaitApplied(short, 99); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitApplied with cancelled ctx: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.MaxPayload = 0 },
		func(c *Config) { c.MaxPayload = MaxCommandSize },
		func(c *Config) { c.JobRetention = 0 },
		func(c *Config) { c.MaxFinishedJobs = 0 },
		func(c *Config) { c.DefaultMaxAttempts = -1 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
		if _, err := NewFSM(c); err == nil {
			t.Errorf("NewFSM(%+v) accepted", c)
		}
	}
	f, _ := NewFSM(DefaultConfig())
	if err := f.RegisterStateMachine("", newCounterSM()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty type: %v", err)
	}
	if err := f.RegisterStateMachine("x", newCounterSM()); err != nil {
		t.Fatal(err)
	}
	if err := f.RegisterStateMachine("x", newCounterSM()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("duplicate type: %v", err)
	}
}

func TestRunnableJobsAndOwnedBy(t *testing.T) {
	f, _ := newTestFSM(t, DefaultConfig())
	for i, c := range []Command{
		Heartbeat{Node: "a", Incarnation: 1},
		Grant{Shard: 1, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1},
		Grant{Shard: 2, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1},
		JobEnqueue{Shard: 1, Now: 0},                                            // 1: runnable
		JobEnqueue{Shard: 1, Now: 0},                                            // 2: started, times out at 110
		JobEnqueue{Shard: 1, Now: 0},                                            // 3: backs off until 1000
		JobStart{Shard: 1, Epoch: 1, Owner: "a", Job: 2, Timeout: 100, Now: 10}, //
		JobStart{Shard: 1, Epoch: 1, Owner: "a", Job: 3, Now: 10},               //
		JobFail{Shard: 1, Epoch: 1, Job: 3, Attempt: 1, Backoff: 990, Now: 10},  //
		Release{Shard: 2, Epoch: 1, Owner: "a"},                                 //
	} {
		if r := f.ApplyCommand(uint64(i+1), c); r.Err != nil {
			t.Fatalf("%#v: %v", c, r.Err)
		}
	}
	ids := func(js []JobRecord) []uint64 {
		var out []uint64
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	st := f.State()
	for _, tc := range []struct {
		now  int64
		want string
	}{{50, "[1]"}, {111, "[1 2]"}, {1000, "[1 2 3]"}} {
		if got := fmt.Sprint(ids(st.RunnableJobs(1, tc.now))); got != tc.want {
			t.Errorf("RunnableJobs(1, %d) = %s, want %s", tc.now, got, tc.want)
		}
	}
	if got := st.OwnedBy("a"); len(got) != 1 || got[0].Shard != 1 {
		t.Errorf("OwnedBy(a) = %+v", got)
	}
}
