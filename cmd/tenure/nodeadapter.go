package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/node"
)

// This file adapts *node.Node to what the agent and its workload need
// (runningNode); httpapi serves it.

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
	return &realNode{n: n}, nil
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
	cfg := c.Config
	cfg.GossipAdvertise, cfg.RaftAdvertise, cfg.HTTPAddr = gossipAdv, raftAdv, httpAdv
	if cfg.Diskless {
		// A disk-less member keeps no data dir: the agent's default
		// --data-dir does not apply to it.
		cfg.DataDir = ""
	}
	cfg.Logger = log
	return cfg, cfg.Validate()
}

// realNode is a *node.Node seen as a runningNode.
type realNode struct {
	n *node.Node
}

var _ runningNode = (*realNode)(nil)

func (a *realNode) ID() string { return a.n.ID() }

func (a *realNode) FencedShards() ([]node.ShardRange, error) { return a.n.FencedShards() }

func (a *realNode) SetFencedTakeover(ctx context.Context, first, last uint32, fenced bool) error {
	return a.n.SetFencedTakeover(ctx, first, last, fenced)
}

// API serves the node with httpapi.New.
func (a *realNode) API(o httpapi.Options) (*httpapi.Handler, error) { return httpapi.New(a.n, o) }

func (a *realNode) Close(ctx context.Context) error {
	err := a.n.Close(ctx)
	if errors.Is(err, node.ErrClosed) {
		return nil
	}
	return err
}

func (a *realNode) Owned() []ownedShard {
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
func (a *realNode) ProcessJobs(ctx context.Context) {
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
