package cluster

// A member holds no Raft state (cluster version 5, docs/control-group.md
// "Members hold no Raft state"). A VoterNever node with the stream
// configured starts without a hashicorp/raft instance: it follows the
// committed-state stream and proposes over the RPC path. It starts one
// only while the cluster is below version 5 — a voter refuses the stream
// because the version is not active yet, or is an older binary without
// Control.Subscribe — so it can be a Raft non-voter as before; once its
// replica has version 5 and the leader removed it from the configuration,
// that instance is shut down again (dropRaft).
//
// Every read of Raft state goes through the nil-safe helpers below: a node
// without Raft is a follower that knows no configuration, no term, and
// whose indexes are its stream replica's.

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// rft is this node's Raft instance, nil on a member without one.
func (g *ControlGroup) rft() *raft.Raft { return g.raftP.Load() }

// HasRaft reports whether this node runs a Raft instance now (false: a
// member on the stream).
func (g *ControlGroup) HasRaft() bool { return g.rft() != nil }

func (g *ControlGroup) raftState() raft.RaftState {
	if r := g.rft(); r != nil {
		return r.State()
	}
	return raft.Follower
}

func (g *ControlGroup) isRaftLeader() bool { return g.raftState() == raft.Leader }

func (g *ControlGroup) leaderWithID() (raft.ServerAddress, raft.ServerID) {
	if r := g.rft(); r != nil {
		return r.LeaderWithID()
	}
	return "", ""
}

func (g *ControlGroup) currentTerm() uint64 {
	if r := g.rft(); r != nil {
		return r.CurrentTerm()
	}
	return 0
}

// commitIndex is Raft's commit index; without Raft, the replica's stream
// index (everything it applied is committed).
func (g *ControlGroup) commitIndex() uint64 {
	if r := g.rft(); r != nil {
		return r.CommitIndex()
	}
	return g.streamIndex()
}

// appliedIndex is Raft's applied index; without Raft, the stream index.
func (g *ControlGroup) appliedIndex() uint64 {
	if r := g.rft(); r != nil {
		return r.AppliedIndex()
	}
	return g.streamIndex()
}

// raftLastIndex is the last index of Raft's log; without Raft, the stream
// index.
func (g *ControlGroup) raftLastIndex() uint64 {
	if r := g.rft(); r != nil {
		return r.LastIndex()
	}
	return g.streamIndex()
}

func (g *ControlGroup) streamIndex() uint64 {
	if g.rec != nil {
		return g.rec.lastIndex()
	}
	return 0
}

func (g *ControlGroup) lastContact() time.Time {
	if r := g.rft(); r != nil {
		return r.LastContact()
	}
	return time.Time{}
}

// errNoRaft: this node runs no Raft instance (a member on the stream).
var errNoRaft = errors.New("cluster: this node runs no raft (a member on the stream)")

// latestConfiguration is the latest Raft configuration this node knows
// (empty without Raft).
func (g *ControlGroup) latestConfiguration() (raft.Configuration, error) {
	r := g.rft()
	if r == nil {
		return raft.Configuration{}, errNoRaft
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, err
	}
	return f.Configuration(), nil
}

// lazyRaft reports whether this node starts without Raft: a member
// (VoterNever) that can follow the stream.
func (c *ControlConfig) lazyRaft() bool {
	return c.Voter == VoterNever && c.AppliedIndex != nil && c.StreamActive != nil
}

// startRaft starts this node's Raft instance if it has none (idempotent).
func (g *ControlGroup) startRaft() error {
	g.raftMu.Lock()
	defer g.raftMu.Unlock()
	if g.rft() != nil {
		return nil
	}
	if g.isClosing() {
		return ErrControlClosed
	}
	cfg := g.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = g.notifyCh
	rc.Logger = g.hlog
	rc.ShutdownOnRemove = false // a removed node stays up as a follower and can be re-added
	var fsm raft.FSM = cfg.FSM
	if g.rec != nil {
		fsm = g.rec
	}
	r, err := raft.NewRaft(rc, fsm, cfg.LogStore, cfg.StableStore, cfg.SnapshotStore, g.trans)
	if err != nil {
		return fmt.Errorf("cluster: start raft: %w", err)
	}
	g.raftP.Store(r)
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(observer)
	g.raftStop = make(chan struct{})
	stop := g.raftStop
	g.goLoop(func() { g.leaderWatchLoop(r, observer, obs, stop) })
	if cfg.lazyRaft() {
		g.log.Info("cluster: raft started: the cluster is below the stream's version; this member is a raft non-voter until it is active")
	}
	return nil
}

// dropRaft shuts down a member's Raft instance once it is not needed: its
// replica has the stream's cluster version and no Raft configuration it
// knows lists it (the leader removed it). Only lazyRaft nodes drop Raft.
func (g *ControlGroup) dropRaft() {
	if !g.cfg.lazyRaft() || !g.cfg.StreamActive() {
		return
	}
	g.raftMu.Lock()
	defer g.raftMu.Unlock()
	r := g.rft()
	if r == nil {
		return
	}
	// Still listed and contacted by a leader lately: the leader has not
	// removed it yet. A removed server may never hear of its removal, so a
	// leader silent for 3·ElectionTimeout counts as removed too (as in
	// needStream); the leader removes a member it cannot reach anyway.
	if c, err := g.latestConfiguration(); err == nil {
		for _, s := range c.Servers {
			if string(s.ID) == g.cfg.NodeID && time.Since(r.LastContact()) <= 3*g.cfg.ElectionTimeout {
				return
			}
		}
	}
	g.raftP.Store(nil)
	close(g.raftStop)
	if err := r.Shutdown().Error(); err != nil {
		g.log.Warn("cluster: raft shutdown", "err", err)
	}
	g.log.Info("cluster: raft stopped: this member follows the stream only")
}
