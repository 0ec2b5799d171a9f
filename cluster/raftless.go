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

	"github.com/tenurehq/tenure/internal/mutation"
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
	g.stopRefuser()
	trans := g.trans
	if cfg.dropsRaft() {
		// Raft closes its transport on Shutdown; a node that drops Raft
		// and may start it again (raftOnDemand) keeps it open: the group's
		// Close closes it.
		trans = keepOpen(trans)
	}
	r, err := raft.NewRaft(rc, fsm, cfg.LogStore, cfg.StableStore, cfg.SnapshotStore, trans)
	if err != nil {
		return fmt.Errorf("cluster: start raft: %w", err)
	}
	g.raftP.Store(r)
	g.raftStartedAt = time.Now()
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

// dropsRaft reports whether this node shuts its Raft instance down while
// it follows the stream: a member (lazyRaft), and a VoterAuto node with
// the stream configured — a voter-capable node that is not one of the
// leader's StreamStandbys follows the stream without Raft too (issue 24),
// and starts Raft again when the leader adds it back (raftOnDemand).
// VoterAlways nodes keep theirs.
func (c *ControlConfig) dropsRaft() bool {
	if c.lazyRaft() {
		return true
	}
	return (c.Voter == VoterAuto || c.Voter == "") && c.AppliedIndex != nil && c.StreamActive != nil
}

// dropRaft shuts down this node's Raft instance once it is not needed: its
// replica has the stream's cluster version and no Raft configuration it
// knows lists it (the leader removed it). Only dropsRaft nodes drop Raft,
// and never while the configuration lists them as a voter or they lead.
func (g *ControlGroup) dropRaft() {
	if !g.cfg.dropsRaft() || !g.cfg.StreamActive() {
		return
	}
	if g.peers == nil && !g.cfg.lazyRaft() {
		return // without gossip a voter-capable node keeps Raft (checkDialed)
	}
	g.raftMu.Lock()
	defer g.raftMu.Unlock()
	r := g.rft()
	if r == nil || r.State() == raft.Leader {
		return
	}
	// Still listed and contacted by a leader lately: the leader has not
	// removed it yet. A removed server may never hear of its removal, so a
	// leader silent for 3·ElectionTimeout counts as removed too (as in
	// needStream); the leader removes a member it cannot reach anyway. A
	// voter keeps Raft whatever the silence: it is needed for a quorum.
	// A voter-capable node waits longer: the leader may be about to
	// promote it (a caught-up standby), and a standby that dropped Raft
	// while its promotion was in flight would hold up the quorum until
	// raftOnDemand restarted it.
	quiet := 3 * g.cfg.ElectionTimeout
	if !g.cfg.lazyRaft() {
		quiet = autoDropQuiet * g.cfg.ElectionTimeout
	}
	if c, err := g.latestConfiguration(); err == nil {
		for _, s := range c.Servers {
			if string(s.ID) != g.cfg.NodeID {
				continue
			}
			if (s.Suffrage == raft.Voter && !mutation.On(mutation.VoterDropsRaft)) || time.Since(r.LastContact()) <= quiet {
				return
			}
		}
	}
	// A voter-capable node just started (or restarted on the leader's
	// request) is not in the configuration it knows yet: give the leader
	// the same time to add it as a standby before it counts as not wanted.
	if !g.cfg.lazyRaft() && (time.Since(g.raftStartedAt) <= quiet || time.Since(r.LastContact()) <= quiet) {
		return
	}
	g.raftP.Store(nil)
	close(g.raftStop)
	if err := r.Shutdown().Error(); err != nil {
		g.log.Warn("cluster: raft shutdown", "err", err)
	}
	g.startRefuser()
	g.log.Info("cluster: raft stopped: this node follows the stream only", "voter", string(g.cfg.Voter))
}

// autoDropQuiet is how many ElectionTimeouts a voter-capable node out of
// the configuration (or a non-voter no leader contacted) waits before it
// drops Raft (dropRaft); a member waits 3.
const autoDropQuiet = 10

// raftOnDemand reports whether this node runs Raft now (the Raft port
// refuses streams while it does not). A VoterAuto node on the stream that
// dropped its Raft starts it again when a Raft stream arrives — the leader
// added it back as a standby (its reconciler picks standbys from the
// stream followers) — so the leader's next attempt finds it running. The
// start is asynchronous and idempotent; a node whose replica is below the
// stream's version, or that is closing, starts nothing here.
func (g *ControlGroup) raftOnDemand() bool {
	if g.HasRaft() {
		return true
	}
	if g.cfg.lazyRaft() || !g.cfg.dropsRaft() || !g.cfg.StreamActive() || g.isClosing() {
		return false
	}
	if g.raftStarting.CompareAndSwap(false, true) {
		go func() {
			defer g.raftStarting.Store(false)
			if err := g.startRaft(); err != nil && !errors.Is(err, ErrControlClosed) {
				g.log.Warn("cluster: start raft on the leader's request", "err", err)
				return
			}
			g.log.Info("cluster: raft started: the leader added this node as a standby")
		}()
	}
	return false
}

// keepOpenTransport is a raft.Transport without Close, so a Raft instance
// shut down by dropRaft leaves it open for the next one; the pre-vote
// variant keeps raft's pre-vote (enabled by the transport's type).
type keepOpenTransport struct{ raft.Transport }

type keepOpenPreVoteTransport struct{ keepOpenTransport }

func (t keepOpenPreVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func keepOpen(t raft.Transport) raft.Transport {
	if _, ok := t.(raft.WithPreVote); ok {
		return keepOpenPreVoteTransport{keepOpenTransport{t}}
	}
	return keepOpenTransport{t}
}

// startRefuser answers the Raft RPCs that reach the transport while this
// node runs no Raft (after dropRaft; under raftMu): each fails at once,
// and asks for Raft (raftOnDemand) — the leader added this node back. On
// the TCP transport the mux already refuses Raft streams then; an
// in-memory transport delivers them here.
func (g *ControlGroup) startRefuser() {
	stop, done := make(chan struct{}), make(chan struct{})
	g.refuserStop, g.refuserDone = stop, done
	consumer := g.trans.Consumer()
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-g.closing:
				return
			case rpc := <-consumer:
				rpc.Respond(nil, errNoRaft)
				g.raftOnDemand()
			}
		}
	}()
}

// stopRefuser ends startRefuser's loop, if any, before a Raft instance
// consumes the transport (under raftMu).
func (g *ControlGroup) stopRefuser() {
	if g.refuserStop == nil {
		return
	}
	close(g.refuserStop)
	<-g.refuserDone
	g.refuserStop, g.refuserDone = nil, nil
}
