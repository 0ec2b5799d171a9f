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
	cfg := node.Config{
		NodeID:          c.NodeID,
		Group:           c.Group,
		Seeds:           c.Seeds,
		BootstrapExpect: c.BootstrapExpect,
		DataDir:         dataDir(c),
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
		Diskless:        c.Diskless,
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

// realNode is a *node.Node seen as a runningNode.
type realNode struct {
	n *node.Node
}

var _ runningNode = (*realNode)(nil)

func (a *realNode) ID() string { return a.n.ID() }

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

// dataDir is the node's data dir: none for a disk-less member (the
// default --data-dir does not apply to it).
func dataDir(c agentConfig) string {
	if c.Diskless {
		return ""
	}
	return c.DataDir
}
