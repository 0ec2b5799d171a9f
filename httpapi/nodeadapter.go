package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// This file adapts *node.Node to Backend.

// Adapt returns n as a Backend (with KeyringBackend and UpgradeBackend):
// what New serves. Wrap it to serve a node with extra behaviour.
func Adapt(n *node.Node) Backend { return &nodeAdapter{n: n} }

// nodeAdapter is a *node.Node seen as a Backend.
type nodeAdapter struct {
	n *node.Node
}

var (
	_ Backend          = (*nodeAdapter)(nil)
	_ KeyringBackend   = (*nodeAdapter)(nil)
	_ UpgradeBackend   = (*nodeAdapter)(nil)
	_ PlacementBackend = (*nodeAdapter)(nil)
	_ ChangeBackend    = (*nodeAdapter)(nil)
	_ ShardFeedBackend = (*nodeAdapter)(nil)
)

func (a *nodeAdapter) ShardFor(key string) uint32 { return a.n.ShardFor(key) }

func (a *nodeAdapter) Status() apitypes.Status {
	st := a.n.Status()
	return apitypes.Status{
		Node:          st.ID,
		Group:         st.Group,
		Incarnation:   st.Incarnation,
		Profile:       string(st.Profile),
		Partitions:    st.Partitions,
		ControlLeader: st.ControlLeader,
		Voters:        nonNil(st.Voters),
		AppliedIndex:  st.AppliedIndex,
		Owned:         len(st.Owned),
		Health:        healthFrom(st.Health),
		Members:       a.Members(),
		Stream: &apitypes.Stream{
			Following: st.Stream.Following, Server: st.Stream.Server,
			LagEntries: st.Stream.LagEntries, LagMS: st.Stream.Behind.Milliseconds(), CaughtUp: st.Stream.CaughtUp,
			Reconnects: st.Stream.Reconnects, Snapshots: st.Stream.Snapshots, BytesReceived: st.Stream.BytesReceived,
			Subscribers: st.Stream.Subscribers, BytesSent: st.Stream.BytesSent,
		},
	}
}

func healthFrom(h node.HealthReport) apitypes.Health {
	return apitypes.Health{
		Status:           h.Status.String(),
		Reasons:          nonNil(h.Reasons),
		ControlLeader:    h.ControlLeader,
		LastRenewal:      h.LastRenewal,
		LeaseRemainingMS: h.LeaseRemaining.Milliseconds(),
		Score:            h.Score,
		ReplicaHaltedAt:  h.ReplicaHaltedAt,
	}
}

func (a *nodeAdapter) Health() apitypes.Health { return healthFrom(a.n.Health()) }

func shardFrom(s node.ShardInfo) apitypes.Shard {
	return apitypes.Shard{
		Shard:            s.Shard,
		Owner:            s.Owner,
		Epoch:            s.Epoch,
		State:            s.State.String(),
		Valid:            s.Valid,
		Target:           s.Target,
		Acting:           s.Acting,
		LeaseRemainingMS: s.LeaseRemaining.Milliseconds(),
		Election:         s.Election,
		ChangedAt:        s.ChangedAt,
		Reason:           s.Reason,
		Fenced:           s.Fenced,
	}
}

func (a *nodeAdapter) Shards() []apitypes.Shard {
	in := a.n.Shards()
	out := make([]apitypes.Shard, len(in))
	for i, s := range in {
		out[i] = shardFrom(s)
	}
	for _, l := range a.n.Loads() {
		if int(l.Shard) < len(out) && out[l.Shard].Shard == l.Shard {
			v := l.Load
			out[l.Shard].Load = &v
		}
	}
	return out
}

func (a *nodeAdapter) ShardsGeneration() uint64 { return a.n.ShardsGeneration() }

func (a *nodeAdapter) ShardsSince(since uint64) (uint64, []apitypes.Shard, bool) {
	gen, in, ok := a.n.ShardsSince(since)
	if !ok {
		return gen, nil, false
	}
	out := make([]apitypes.Shard, len(in))
	for i, s := range in {
		out[i] = shardFrom(s)
	}
	if len(out) > 0 {
		for _, l := range a.n.Loads() {
			if i, found := slices.BinarySearchFunc(out, l.Shard, func(s apitypes.Shard, id uint32) int { return cmp.Compare(s.Shard, id) }); found {
				v := l.Load
				out[i].Load = &v
			}
		}
	}
	return gen, out, true
}

func (a *nodeAdapter) Loads() []apitypes.ShardLoad {
	in := a.n.Loads()
	out := make([]apitypes.ShardLoad, len(in))
	for i, l := range in {
		out[i] = apitypes.ShardLoad{Shard: l.Shard, Load: l.Load}
	}
	return out
}

func (a *nodeAdapter) Shard(id uint32) (apitypes.Shard, bool) {
	if int64(id) >= int64(a.n.Partitions()) {
		return apitypes.Shard{}, false
	}
	return shardFrom(a.n.Shard(id)), true
}

func (a *nodeAdapter) Members() []apitypes.Member {
	in := a.n.Members()
	out := make([]apitypes.Member, len(in))
	now := time.Now()
	for i, m := range in {
		out[i] = memberFrom(m, a.n.Timing(), now)
	}
	return out
}

// memberFrom is m as the API shows it at now: with its lease remaining
// and whether it is suspected, from gossip and its heartbeats, ahead of
// the control group's verdict.
func memberFrom(m node.Member, t node.Timing, now time.Time) apitypes.Member {
	out := apitypes.Member{
		ID: m.ID, Group: m.Group, Incarnation: m.Incarnation, Addr: m.Addr, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr,
		State: m.State.String(), Health: m.Health, Draining: m.Draining, Live: m.Live, Voter: m.Voter, Leader: m.Leader,
		Version: m.Version, Tags: m.Tags, Weight: m.Weight, Zone: m.Zone, Excluded: m.Excluded, Unproven: m.Unproven,
	}
	if m.Load != nil {
		total := m.Load.Total
		out.Load = &total
		for _, h := range m.Load.Hot {
			out.HotShards = append(out.HotShards, apitypes.ShardLoad{Shard: h.Shard, Load: h.Load})
		}
	}
	out.Suspected = m.State == node.MemberSuspect || m.State == node.MemberDead
	if m.Live && !m.UpdatedAt.IsZero() {
		hb := m.UpdatedAt
		out.LastHeartbeat = &hb
		out.LeaseRemainingMS = max(0, hb.Add(t.Lease).Sub(now).Milliseconds())
		if now.Sub(hb) > t.Lease/2 { // two or more heartbeats missed
			out.Suspected = true
		}
	}
	return out
}

func (a *nodeAdapter) Elections() []apitypes.Election {
	var out []apitypes.Election
	for _, s := range a.n.Shards() {
		if s.Election == "" {
			continue
		}
		leader := ""
		if s.State != node.ShardUnowned && s.Valid {
			leader = s.Owner
		}
		out = append(out, apitypes.Election{Name: s.Election, Shard: s.Shard, Leader: leader, Epoch: s.Epoch, State: s.State.String()})
	}
	return out
}

// classify wraps node errors in the API's error classes.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, node.ErrNoQuorum), errors.Is(err, node.ErrClosed):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, node.ErrJobNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, node.ErrJobState), errors.Is(err, node.ErrStaleToken), errors.Is(err, node.ErrNotOwner),
		errors.Is(err, node.ErrVersionInactive):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, node.ErrQueueFull):
		return fmt.Errorf("%w: %w", ErrQueueFull, err)
	case errors.Is(err, node.ErrRequestIDReused):
		return fmt.Errorf("%w: %w", ErrRequestIDReused, err)
	case errors.Is(err, node.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrNotImplemented, err)
	case errors.Is(err, node.ErrInvalid), errors.Is(err, node.ErrInvalidConfig), errors.Is(err, node.ErrUnknownType):
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	case errors.Is(err, node.ErrUnauthorized):
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	return err
}

func (a *nodeAdapter) EnqueueJob(ctx context.Context, req apitypes.JobRequest) (apitypes.Job, bool, error) {
	return a.EnqueueJobID(ctx, req, [16]byte{})
}

// EnqueueJobID implements RequestBackend (a zero id: the node draws one).
func (a *nodeAdapter) EnqueueJobID(ctx context.Context, req apitypes.JobRequest, id [16]byte) (apitypes.Job, bool, error) {
	j, created, err := a.n.Enqueue(ctx, node.JobSpec{
		Key: req.Key, ShardKey: req.ShardKey, Type: req.Type, Payload: []byte(req.Payload), MaxAttempts: int(req.MaxAttempts),
		RequestID: node.RequestID(id),
	})
	if err != nil {
		return apitypes.Job{}, false, classify(err)
	}
	return jobFrom(j), created, nil
}

// jobFrom is the one mapping of node's Job (mapped from the ledger's record
// in node's jobFromRecord) to the API's JSON shape: the id as a string, the
// state's name, JSON payloads passed through (others quoted). The two
// types stay apart: the JSON keeps its field names and types, node's API
// its uint64 id, JobState and time.Duration.
func jobFrom(j node.Job) apitypes.Job {
	out := apitypes.Job{
		ID: strconv.FormatUint(j.ID, 10), Shard: j.Shard, Key: j.Key, Type: j.Type, State: j.State.String(),
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Owner: j.Owner, Epoch: j.Epoch, LastError: j.Error, EnqueuedAt: j.EnqueuedAt,
	}
	out.Payload = rawJSON(j.Payload)
	out.Result = rawJSON(j.Result)
	return out
}

// rawJSON passes JSON payloads through and quotes anything else.
func rawJSON(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	return []byte(strconv.Quote(string(b)))
}

// ReadBarrier implements RequestBackend.
func (a *nodeAdapter) ReadBarrier(ctx context.Context) error {
	return classify(a.n.ReadBarrier(ctx))
}

func (a *nodeAdapter) Job(id string) (apitypes.Job, bool) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return apitypes.Job{}, false
	}
	j, err := a.n.Job(n)
	if err != nil {
		return apitypes.Job{}, false
	}
	return jobFrom(j), true
}

var jobStateByName = map[string]node.JobState{
	"pending": node.JobPending, "started": node.JobStarted, "completed": node.JobCompleted, "dead": node.JobDead,
}

func (a *nodeAdapter) Jobs(q JobQuery) []apitypes.Job {
	var nq node.JobQuery
	if q.Shard != nil {
		nq.Shards = []uint32{*q.Shard}
	}
	if q.State != "" {
		st, ok := jobStateByName[q.State]
		if !ok {
			return nil
		}
		nq.States = []node.JobState{st}
	}
	nq.Limit = q.Limit
	in := a.n.Jobs(nq)
	out := make([]apitypes.Job, len(in))
	for i, j := range in {
		out[i] = jobFrom(j)
	}
	return out
}

// Drain drains the node. node.Drain returns at once, with shards still
// here, when no other node is eligible; that is reported as
// ErrNoEligibleNode.
func (a *nodeAdapter) Drain(ctx context.Context) error {
	if err := a.n.Drain(ctx); err != nil {
		return classify(err)
	}
	if len(a.n.Owned()) == 0 {
		return nil
	}
	for _, c := range a.n.Candidates() {
		if c.ID != a.n.ID() && c.Eligible {
			return nil
		}
	}
	return fmt.Errorf("node: drain %s: %w", a.n.ID(), ErrNoEligibleNode)
}

func (a *nodeAdapter) Undrain(ctx context.Context) error { return classify(a.n.Undrain(ctx)) }

// subscribeBuffer is the ownership subscription's buffer beyond one event
// per shard (the subscription's initial replay).
const subscribeBuffer = 1024

func (a *nodeAdapter) Subscribe() (<-chan OwnershipEvent, func()) {
	sub := a.n.Subscribe(2*a.n.Partitions() + subscribeBuffer)
	// Subscribe replays the current owners before returning; those are
	// not moves, so skip what is already buffered.
	skip := len(sub.C())
	out := make(chan OwnershipEvent, subscribeBuffer)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(out)
		for ev := range sub.C() {
			if skip > 0 {
				skip--
				continue
			}
			if ev.Kind != node.OwnerChanged {
				continue
			}
			oe := ev
			if oe.At.IsZero() {
				oe.At = time.Now()
			}
			select {
			case out <- oe:
			case <-stop:
				return
			}
		}
	}()
	return out, func() {
		once.Do(func() {
			close(stop)
			sub.Close()
		})
	}
}
