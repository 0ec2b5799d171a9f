package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/node"
)

// This file adapts *node.Node to what the agent, its HTTP API and its
// workload need (runningNode).

func init() { startNode = startRealNode }

// startRealNode starts a node.Node from the agent's config.
func startRealNode(ctx context.Context, c agentConfig, log *slog.Logger) (runningNode, error) {
	cfg, err := nodeConfig(c, log)
	if err != nil {
		return nil, err
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &nodeAdapter{n: n}, nil
}

// nodeConfig translates the agent's settings into node.Config, filling
// advertise addresses for wildcard binds.
func nodeConfig(c agentConfig, log *slog.Logger) (node.Config, error) {
	gossipAdv, err := advertiseAddr(c.GossipAddr, c.GossipAdvertise)
	if err != nil {
		return node.Config{}, fmt.Errorf("gossip-advertise: %w", err)
	}
	raftAdv, err := advertiseAddr(c.RaftAddr, c.RaftAdvertise)
	if err != nil {
		return node.Config{}, fmt.Errorf("raft-advertise: %w", err)
	}
	httpAdv := ""
	if c.HTTPAddr != "" {
		if httpAdv, err = advertiseAddr(c.HTTPAddr, ""); err != nil {
			return node.Config{}, fmt.Errorf("http-addr: %w", err)
		}
	}
	cfg := node.Config{
		NodeID:          c.NodeID,
		Group:           c.Group,
		Seeds:           c.Seeds,
		BootstrapExpect: c.BootstrapExpect,
		DataDir:         c.DataDir,
		Profile:         node.Profile(c.Profile),
		Partitions:      c.Partitions,
		MinHealth:       c.MinHealth,
		GossipAddr:      c.GossipAddr,
		GossipAdvertise: gossipAdv,
		RaftAddr:        c.RaftAddr,
		RaftAdvertise:   raftAdv,
		HTTPAddr:        httpAdv,
		EncryptionKey:   c.EncryptKey,
		Tags:            c.Tags,
		JobTimeout:      c.JobTimeout,
		MaxPendingJobs:  c.MaxPendingJobs,
		ManualFinalize:  c.ManualFinalize,
		Voter:           node.VoterPreference(c.Voter),
		// --voters-own-shards=false
		VoterOwnsNoShards: !c.VotersOwnShards,
		Logger:            log,
		TLSCAFile:         c.TLSCA,
		TLSCertFile:       c.TLSCert,
		TLSKeyFile:        c.TLSKey,
		Insecure:          c.Insecure,
	}
	return cfg, cfg.Validate()
}

// nodeAdapter is a *node.Node seen as a runningNode.
type nodeAdapter struct {
	n *node.Node
}

var _ runningNode = (*nodeAdapter)(nil)

func (a *nodeAdapter) ID() string { return a.n.ID() }

func (a *nodeAdapter) Close(ctx context.Context) error {
	err := a.n.Close(ctx)
	if errors.Is(err, node.ErrClosed) {
		return nil
	}
	return err
}

func (a *nodeAdapter) Status() statusJSON {
	st := a.n.Status()
	return statusJSON{
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
	}
}

func healthFrom(h node.HealthReport) healthJSON {
	return healthJSON{
		Status:           h.Status.String(),
		Reasons:          nonNil(h.Reasons),
		ControlLeader:    h.ControlLeader,
		LastRenewal:      h.LastRenewal,
		LeaseRemainingMS: h.LeaseRemaining.Milliseconds(),
		Score:            h.Score,
		ReplicaHaltedAt:  h.ReplicaHaltedAt,
	}
}

func (a *nodeAdapter) Health() healthJSON { return healthFrom(a.n.Health()) }

func shardFrom(s node.ShardInfo) shardJSON {
	return shardJSON{
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
	}
}

func (a *nodeAdapter) Shards() []shardJSON {
	in := a.n.Shards()
	out := make([]shardJSON, len(in))
	for i, s := range in {
		out[i] = shardFrom(s)
	}
	return out
}

func (a *nodeAdapter) Shard(id uint32) (shardJSON, bool) {
	if int64(id) >= int64(a.n.Partitions()) {
		return shardJSON{}, false
	}
	return shardFrom(a.n.Shard(id)), true
}

func (a *nodeAdapter) Members() []memberJSON {
	in := a.n.Members()
	out := make([]memberJSON, len(in))
	for i, m := range in {
		out[i] = memberJSON{
			ID: m.ID, Group: m.Group, Incarnation: m.Incarnation, Addr: m.Addr, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr,
			State: m.State.String(), Health: m.Health, Draining: m.Draining, Live: m.Live, Voter: m.Voter, Leader: m.Leader,
			Version: m.Version, Tags: m.Tags,
		}
	}
	return out
}

func (a *nodeAdapter) Elections() []electionJSON {
	var out []electionJSON
	for _, s := range a.n.Shards() {
		if s.Election == "" {
			continue
		}
		leader := ""
		if s.State != node.ShardUnowned && s.Valid {
			leader = s.Owner
		}
		out = append(out, electionJSON{Name: s.Election, Shard: s.Shard, Leader: leader, Epoch: s.Epoch, State: s.State.String()})
	}
	return out
}

// classify wraps node errors in the API's error classes.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, node.ErrNoQuorum), errors.Is(err, node.ErrClosed):
		return fmt.Errorf("%w: %w", errUnavailable, err)
	case errors.Is(err, node.ErrJobNotFound):
		return fmt.Errorf("%w: %w", errNotFound, err)
	case errors.Is(err, node.ErrJobState), errors.Is(err, node.ErrStaleToken), errors.Is(err, node.ErrNotOwner):
		return fmt.Errorf("%w: %w", errConflict, err)
	case errors.Is(err, node.ErrQueueFull):
		return fmt.Errorf("%w: %w", errQueueFull, err)
	case errors.Is(err, node.ErrInvalid), errors.Is(err, node.ErrInvalidConfig), errors.Is(err, node.ErrUnknownType):
		return fmt.Errorf("%w: %w", errBadInput, err)
	}
	return err
}

func (a *nodeAdapter) EnqueueJob(ctx context.Context, req jobRequest) (jobJSON, bool, error) {
	j, created, err := a.n.Enqueue(ctx, node.JobSpec{
		Key: req.Key, ShardKey: req.ShardKey, Type: req.Type, Payload: []byte(req.Payload), MaxAttempts: int(req.MaxAttempts),
	})
	if err != nil {
		return jobJSON{}, false, classify(err)
	}
	return jobFrom(j), created, nil
}

func jobFrom(j node.Job) jobJSON {
	out := jobJSON{
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

func (a *nodeAdapter) Job(id string) (jobJSON, bool) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return jobJSON{}, false
	}
	j, err := a.n.Job(n)
	if err != nil {
		return jobJSON{}, false
	}
	return jobFrom(j), true
}

var jobStateByName = map[string]node.JobState{
	"pending": node.JobPending, "started": node.JobStarted, "completed": node.JobCompleted, "dead": node.JobDead,
}

func (a *nodeAdapter) Jobs(q jobQuery) []jobJSON {
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
	out := make([]jobJSON, len(in))
	for i, j := range in {
		out[i] = jobFrom(j)
	}
	return out
}

func (a *nodeAdapter) Drain(ctx context.Context) error   { return classify(a.n.Drain(ctx)) }
func (a *nodeAdapter) Undrain(ctx context.Context) error { return classify(a.n.Undrain(ctx)) }

func (a *nodeAdapter) Owned() []ownedShard {
	toks := a.n.Owned()
	out := make([]ownedShard, len(toks))
	for i, t := range toks {
		out[i] = ownedShard{Shard: t.Shard, Epoch: t.Epoch}
	}
	return out
}

// maxJobsPerShardTick bounds the jobs the demo workload starts per shard
// per tick.
const maxJobsPerShardTick = 8

// ProcessJobs starts and completes the runnable jobs of every shard the
// node acts on, fenced by the shard's token.
func (a *nodeAdapter) ProcessJobs(ctx context.Context) {
	for _, tok := range a.n.Owned() {
		for i, j := range a.n.RunnableJobs(tok.Shard) {
			if i == maxJobsPerShardTick || ctx.Err() != nil {
				break
			}
			started, err := a.n.StartJob(ctx, tok, j)
			if err != nil {
				continue
			}
			result := fmt.Sprintf(`{"done_by":%q,"token":%q}`, a.n.ID(), tok.String())
			_, _ = a.n.CompleteJob(ctx, started, []byte(result))
		}
	}
}

// subscribeBuffer is the ownership subscription's buffer beyond one event
// per shard (the subscription's initial replay).
const subscribeBuffer = 1024

func (a *nodeAdapter) Subscribe() (<-chan ownershipEvent, func()) {
	sub := a.n.Subscribe(2*a.n.Partitions() + subscribeBuffer)
	// Subscribe replays the current owners before returning; those are
	// not moves, so skip what is already buffered.
	skip := len(sub.C())
	out := make(chan ownershipEvent, subscribeBuffer)
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
			oe := ownershipEvent{Shard: ev.Shard, Epoch: ev.Epoch, Owner: ev.Owner, Previous: ev.Previous, At: ev.At}
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
