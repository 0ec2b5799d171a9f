package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
)

// fakeNode is an in-memory agentNode for API and CLI tests: a 3-node
// cluster seen from "n1", with 8 shards, a job queue and a drain that
// moves n1's shards to n2.
type fakeNode struct {
	mu       sync.Mutex
	shards   []shardJSON
	members  []memberJSON
	jobs     map[string]jobJSON
	keys     map[string]string // shard/key -> job id
	nextJob  int
	draining bool
	health   healthJSON
	subs     []chan ownershipEvent

	// EnqueueErr and DrainErr, if set, are returned by EnqueueJob and Drain.
	EnqueueErr error
	DrainErr   error
	// DrainBlocks makes Drain wait for its context to end.
	DrainBlocks bool
	// PanicOnStatus makes Status panic (for the recovery test).
	PanicOnStatus bool
}

var _ agentNode = (*fakeNode)(nil)

var fakeEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFakeNode() *fakeNode {
	f := &fakeNode{jobs: map[string]jobJSON{}, keys: map[string]string{}}
	owners := []string{"n1", "n2", "n3"}
	for i := range 8 {
		s := shardJSON{Shard: uint32(i), Owner: owners[i%3], Epoch: uint64(i + 1), State: "owned", Valid: true, ChangedAt: fakeEpoch, Reason: "join " + owners[i%3]}
		if s.Owner == "n1" {
			s.Acting, s.LeaseRemainingMS = true, 900
		}
		f.shards = append(f.shards, s)
	}
	f.shards[7] = shardJSON{Shard: 7, Epoch: 3, State: "unowned", Reason: "release", ChangedAt: fakeEpoch}
	f.shards[6].Election = "cron"
	for i, id := range owners {
		f.members = append(f.members, memberJSON{
			ID: id, Group: "default", Incarnation: 1, Addr: "127.0.0.1:" + strconv.Itoa(7946+i),
			RaftAddr: "127.0.0.1:" + strconv.Itoa(8946+i), HTTPAddr: "127.0.0.1:" + strconv.Itoa(9946+i),
			State: "alive", Health: 1, Live: true, Voter: true, Leader: id == "n2", Version: "test",
		})
	}
	f.health = healthJSON{Status: statusHealthy, Reasons: []string{}, ControlLeader: "n2", LastRenewal: fakeEpoch, LeaseRemainingMS: 900, Score: 1}
	return f
}

func (f *fakeNode) Status() statusJSON {
	if f.PanicOnStatus {
		panic("fake: status exploded")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	owned := 0
	for _, s := range f.shards {
		if s.Acting {
			owned++
		}
	}
	return statusJSON{
		Node: "n1", Group: "default", Incarnation: 1, Profile: "fast", Partitions: len(f.shards),
		ControlLeader: "n2", Voters: []string{"n1", "n2", "n3"}, AppliedIndex: 42, Owned: owned,
		Health: f.health, Members: append([]memberJSON(nil), f.members...),
	}
}

func (f *fakeNode) Shards() []shardJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]shardJSON(nil), f.shards...)
}

func (f *fakeNode) Shard(id uint32) (shardJSON, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if int(id) >= len(f.shards) {
		return shardJSON{}, false
	}
	return f.shards[id], true
}

func (f *fakeNode) Members() []memberJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]memberJSON(nil), f.members...)
}

func (f *fakeNode) Elections() []electionJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []electionJSON
	for _, s := range f.shards {
		if s.Election != "" {
			out = append(out, electionJSON{Name: s.Election, Shard: s.Shard, Leader: s.Owner, Epoch: s.Epoch, State: s.State})
		}
	}
	return out
}

func (f *fakeNode) Health() healthJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.health
}

func (f *fakeNode) setHealth(status string, reasons ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health.Status, f.health.Reasons = status, reasons
}

func (f *fakeNode) EnqueueJob(ctx context.Context, req jobRequest) (jobJSON, bool, error) {
	if f.EnqueueErr != nil {
		return jobJSON{}, false, f.EnqueueErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sk := req.ShardKey
	if sk == "" {
		sk = req.Key
	}
	if sk == "bad" {
		return jobJSON{}, false, fmt.Errorf("%w: shard key %q", errBadInput, sk)
	}
	shard := uint32(len(sk) % len(f.shards))
	k := fmt.Sprintf("%d/%s", shard, req.Key)
	if id, ok := f.keys[k]; ok && req.Key != "" {
		return f.jobs[id], false, nil
	}
	f.nextJob++
	id := strconv.Itoa(f.nextJob)
	j := jobJSON{ID: id, Shard: shard, Key: req.Key, Type: req.Type, State: "pending", MaxAttempts: max(req.MaxAttempts, 3), Payload: req.Payload, EnqueuedAt: fakeEpoch}
	f.jobs[id] = j
	f.keys[k] = id
	return j, true, nil
}

func (f *fakeNode) Job(id string) (jobJSON, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	return j, ok
}

func (f *fakeNode) Jobs(q jobQuery) []jobJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []jobJSON
	for _, j := range f.jobs {
		if (q.Shard == nil || *q.Shard == j.Shard) && (q.State == "" || q.State == j.State) {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		x, _ := strconv.Atoi(out[a].ID)
		y, _ := strconv.Atoi(out[b].ID)
		return x < y
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

// setJobState moves a job to a state (the fake has no workers).
func (f *fakeNode) setJobState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	j.State = state
	f.jobs[id] = j
}

func (f *fakeNode) Drain(ctx context.Context) error {
	if f.DrainErr != nil {
		return f.DrainErr
	}
	if f.DrainBlocks {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	f.draining = true
	var evs []ownershipEvent
	for i, s := range f.shards {
		if s.Owner == "n1" {
			s.Owner, s.Epoch, s.Acting, s.LeaseRemainingMS, s.Reason = "n2", s.Epoch+1, false, 0, "drain n1"
			f.shards[i] = s
			evs = append(evs, ownershipEvent{Shard: s.Shard, Epoch: s.Epoch, Owner: "n2", Previous: "n1", At: fakeEpoch})
		}
	}
	f.members[0].Draining = true
	subs := append([]chan ownershipEvent(nil), f.subs...)
	f.mu.Unlock()
	for _, ev := range evs {
		for _, c := range subs {
			select {
			case c <- ev:
			default:
			}
		}
	}
	return nil
}

func (f *fakeNode) Undrain(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.draining = false
	f.members[0].Draining = false
	return nil
}

// subscribers counts open subscriptions.
func (f *fakeNode) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *fakeNode) Subscribe() (<-chan ownershipEvent, func()) {
	c := make(chan ownershipEvent, 64)
	f.mu.Lock()
	f.subs = append(f.subs, c)
	f.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for i, s := range f.subs {
				if s == c {
					f.subs = append(f.subs[:i], f.subs[i+1:]...)
				}
			}
		})
	}
}
