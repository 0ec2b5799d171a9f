// Package httpapitest is an in-memory httpapi.Backend and HTTP helpers for
// the tests of httpapi and the tenure CLI.
package httpapitest

import (
	"context"
	"fmt"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Node is an in-memory httpapi.Backend for API and CLI tests: a 3-node
// cluster seen from "n1", with 8 shards, a job queue and a drain that
// moves n1's shards to n2.
type Node struct {
	mu       sync.Mutex
	shards   []apitypes.Shard
	members  []apitypes.Member
	jobs     map[string]apitypes.Job
	keys     map[string]string // shard/key -> job id
	nextJob  int
	draining bool
	health   apitypes.Health
	subs     []chan httpapi.OwnershipEvent

	// EnqueueErr and DrainErr, if set, are returned by EnqueueJob and Drain.
	EnqueueErr error
	DrainErr   error
	// DrainBlocks makes Drain wait for its context to end.
	DrainBlocks bool
	// DrainNowhere makes Drain behave as on the last eligible node: it
	// marks the node draining, keeps its shards and returns
	// httpapi.ErrNoEligibleNode.
	DrainNowhere bool
	// Self is the node's id in Status (default "n1").
	Self string
	// PanicOnStatus makes Status panic (for the recovery test).
	PanicOnStatus bool
}

var _ httpapi.Backend = (*Node)(nil)

// Epoch is the fake's fixed time.
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// NewNode returns the fake: n1 of n1..n3, 8 shards, shard 7 unowned, an
// election "cron" on shard 6, shard 5 under fenced takeover.
func NewNode() *Node {
	f := &Node{jobs: map[string]apitypes.Job{}, keys: map[string]string{}}
	owners := []string{"n1", "n2", "n3"}
	for i := range 8 {
		s := apitypes.Shard{Shard: uint32(i), Owner: owners[i%3], Epoch: uint64(i + 1), State: "owned", Valid: true, ChangedAt: Epoch, Reason: "join " + owners[i%3]}
		if s.Owner == "n1" {
			s.Acting, s.LeaseRemainingMS = true, 900
		}
		f.shards = append(f.shards, s)
	}
	f.shards[7] = apitypes.Shard{Shard: 7, Epoch: 3, State: "unowned", Reason: "release", ChangedAt: Epoch}
	f.shards[6].Election = "cron"
	f.shards[5].Fenced = true
	for i, id := range owners {
		f.members = append(f.members, apitypes.Member{
			ID: id, Group: "default", Incarnation: 1, Addr: "127.0.0.1:" + strconv.Itoa(7946+i),
			RaftAddr: "127.0.0.1:" + strconv.Itoa(8946+i), HTTPAddr: "127.0.0.1:" + strconv.Itoa(9946+i),
			State: "alive", Health: 1, Live: true, Voter: true, Leader: id == "n2", Version: "test",
		})
	}
	f.health = apitypes.Health{Status: apitypes.StatusHealthy, Reasons: []string{}, ControlLeader: "n2", LastRenewal: Epoch, LeaseRemainingMS: 900, Score: 1}
	return f
}

func (f *Node) Status() apitypes.Status {
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
	self := f.Self
	if self == "" {
		self = "n1"
	}
	return apitypes.Status{
		Node: self, Group: "default", Incarnation: 1, Profile: "fast", Partitions: len(f.shards),
		ControlLeader: "n2", Voters: []string{"n1", "n2", "n3"}, AppliedIndex: 42, Owned: owned,
		Health: f.health, Members: append([]apitypes.Member(nil), f.members...),
	}
}

func (f *Node) Shards() []apitypes.Shard {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apitypes.Shard(nil), f.shards...)
}

func (f *Node) Shard(id uint32) (apitypes.Shard, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if int(id) >= len(f.shards) {
		return apitypes.Shard{}, false
	}
	return f.shards[id], true
}

// SetShard replaces a shard's record.
func (f *Node) SetShard(s apitypes.Shard) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shards[s.Shard] = s
}

// ShardFor is the shard the fake places key on (its length, modulo the
// shards), as EnqueueJob does.
func (f *Node) ShardFor(key string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return uint32(len(key) % len(f.shards))
}

func (f *Node) Members() []apitypes.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apitypes.Member(nil), f.members...)
}

// SetMember replaces the member with m's id (or adds m).
func (f *Node) SetMember(m apitypes.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.members {
		if f.members[i].ID == m.ID {
			f.members[i] = m
			return
		}
	}
	f.members = append(f.members, m)
}

func (f *Node) Elections() []apitypes.Election {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apitypes.Election
	for _, s := range f.shards {
		if s.Election != "" {
			out = append(out, apitypes.Election{Name: s.Election, Shard: s.Shard, Leader: s.Owner, Epoch: s.Epoch, State: s.State})
		}
	}
	return out
}

func (f *Node) Health() apitypes.Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.health
}

// SetHealth sets the health report's status and reasons.
func (f *Node) SetHealth(status string, reasons ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health.Status, f.health.Reasons = status, reasons
}

func (f *Node) EnqueueJob(ctx context.Context, req apitypes.JobRequest) (apitypes.Job, bool, error) {
	if f.EnqueueErr != nil {
		return apitypes.Job{}, false, f.EnqueueErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sk := req.ShardKey
	if sk == "" {
		sk = req.Key
	}
	if sk == "bad" {
		return apitypes.Job{}, false, fmt.Errorf("%w: shard key %q", httpapi.ErrBadInput, sk)
	}
	shard := uint32(len(sk) % len(f.shards))
	k := fmt.Sprintf("%d/%s", shard, req.Key)
	if id, ok := f.keys[k]; ok && req.Key != "" {
		return f.jobs[id], false, nil
	}
	f.nextJob++
	id := strconv.Itoa(f.nextJob)
	j := apitypes.Job{ID: id, Shard: shard, Key: req.Key, Type: req.Type, State: "pending", MaxAttempts: max(req.MaxAttempts, 3), Payload: req.Payload, EnqueuedAt: Epoch}
	f.jobs[id] = j
	f.keys[k] = id
	return j, true, nil
}

func (f *Node) Job(id string) (apitypes.Job, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	return j, ok
}

func (f *Node) Jobs(q httpapi.JobQuery) []apitypes.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apitypes.Job
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

// SetJobState moves a job to a state (the fake has no workers).
func (f *Node) SetJobState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	j.State = state
	f.jobs[id] = j
}

func (f *Node) Drain(ctx context.Context) error {
	if f.DrainErr != nil {
		return f.DrainErr
	}
	if f.DrainBlocks {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	f.draining = true
	if f.DrainNowhere {
		f.members[0].Draining = true
		f.mu.Unlock()
		return fmt.Errorf("fake: drain n1: %w", httpapi.ErrNoEligibleNode)
	}
	var evs []httpapi.OwnershipEvent
	for i, s := range f.shards {
		if s.Owner == "n1" {
			s.Owner, s.Epoch, s.Acting, s.LeaseRemainingMS, s.Reason = "n2", s.Epoch+1, false, 0, "drain n1"
			f.shards[i] = s
			evs = append(evs, httpapi.OwnershipEvent{Shard: s.Shard, Epoch: s.Epoch, Owner: "n2", Previous: "n1", At: Epoch})
		}
	}
	f.members[0].Draining = true
	subs := append([]chan httpapi.OwnershipEvent(nil), f.subs...)
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

func (f *Node) Undrain(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.draining = false
	f.members[0].Draining = false
	return nil
}

// Subscribers counts open subscriptions.
func (f *Node) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *Node) Subscribe() (<-chan httpapi.OwnershipEvent, func()) {
	c := make(chan httpapi.OwnershipEvent, 64)
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
