package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// Keeping the Raft configuration in line with membership. The decision is the
// pure function planReconcile (state in, changes out); reconcileOnce gathers
// the state and applies the changes in order, stopping at the first failure.
//
// Rules (see docs/control-group.md):
//   - an alive member not in the configuration is added as a non-voter;
//   - a non-voter that left gossip gracefully (EventLeave) is removed; a
//     voter that left gossip keeps its place (a rolling restart must not
//     shrink or reshuffle the voter set) and is handled like a dead voter
//     below if it does not come back. A server that asks to leave the
//     configuration (its own Shutdown, Control.Remove) is removed by that
//     request;
//   - a known address coming back with a new id replaces the old entry; a
//     known id at a new address has its address updated — both, like a
//     join, only once the member proved its id at that address over an
//     authenticated connection (proof.go; gossip alone changes nothing);
//   - a gossip "dead" hint never removes anything by itself. A voter not
//     seen alive for DeadVoterTimeout is replaced — a caught-up alive
//     non-voter is promoted first, then the dead voter removed, so the voter
//     count never drops — and without a replacement nothing happens; a
//     non-voter not seen alive for DeadVoterTimeout is removed;
//   - a voter whose member gossips VoterNever (not this leader itself) is
//     demoted once a caught-up non-voter can replace it (promoted first);
//   - while there are fewer than MaxVoters voters, caught-up alive
//     non-voters are promoted.
//
// Promotion candidates follow each member's gossiped VoterPreference
// (voter.go): VoterNever members are never promoted, VoterAlways members
// before VoterAuto ones, lowest id first within each.

type changeKind uint8

const (
	changeAddNonvoter changeKind = iota + 1
	changePromote
	changeRemove
	changeUpdateAddr
	changeDemote
)

func (k changeKind) String() string {
	switch k {
	case changeAddNonvoter:
		return "add-nonvoter"
	case changePromote:
		return "promote"
	case changeRemove:
		return "remove"
	case changeUpdateAddr:
		return "update-addr"
	case changeDemote:
		return "demote"
	}
	return fmt.Sprintf("change(%d)", uint8(k))
}

// raftChange is one configuration change.
type raftChange struct {
	Kind   changeKind
	ID     string
	Addr   string
	Voter  bool // for changeUpdateAddr: keep the server a voter
	Reason string
}

func (c raftChange) String() string {
	return fmt.Sprintf("%s %s %s (%s)", c.Kind, c.ID, c.Addr, c.Reason)
}

// reconcileState is everything planReconcile decides from.
type reconcileState struct {
	Self             string
	Servers          []ServerInfo         // current Raft configuration
	Members          []Member             // gossip view
	Left             map[string]uint64    // ids that left gracefully or were removed
	GoneSince        map[string]time.Time // servers not seen alive, since when
	CaughtUp         map[string]bool      // non-voters close enough to the leader to vote
	Now              time.Time
	DeadVoterTimeout time.Duration
	MaxVoters        int
	// Stream: members follow the committed-state stream (cluster version
	// 5): VoterNever nodes are kept out of the configuration, and at most
	// Standbys voter-capable non-voters stay in it (the rest follow the
	// stream too).
	Stream   bool
	Standbys int
	// StreamPending: the cluster has recorded no version yet (a fresh
	// cluster; ControlConfig.StreamPending). Members that follow the
	// stream (VoterNever) are not added then — they wait for the stream
	// without Raft — but none is removed either: an old cluster that never
	// recorded a version keeps its non-voters until it does.
	StreamPending bool
	// Proven are the members that proved their id at the Raft address
	// they gossip (proof.go); a member not in it is ignored, as if gossip
	// did not list it. nil: every member counts as proven (no
	// authentication).
	Proven map[string]bool
	// Revoked are the servers on the committed deny-list
	// (ControlConfig.Revoked): removed from the configuration at once,
	// whatever gossip says (identity/revoke.go).
	Revoked map[string]bool
}

// planReconcile returns the changes that bring the configuration in line
// with membership, in the order they must be applied. It is deterministic:
// the same state gives the same changes.
func planReconcile(s reconcileState) []raftChange {
	servers := append([]ServerInfo(nil), s.Servers...)
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	members := append([]Member(nil), s.Members...)
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })

	alive := map[string]Member{} // usable members: alive, with a Raft address
	live := map[string]bool{}    // not gone: alive or suspect
	for _, m := range members {
		if m.RaftAddr == "" || ValidateNodeID(m.ID) != nil || s.Revoked[m.ID] {
			continue
		}
		if s.Proven != nil && !s.Proven[m.ID] && m.ID != s.Self {
			continue // gossip alone never changes the configuration
		}
		switch m.State {
		case StateAlive:
			alive[m.ID] = m
			live[m.ID] = true
		case StateSuspect:
			live[m.ID] = true
		}
	}
	live[s.Self] = true

	cfg := map[string]ServerInfo{}
	for _, sv := range servers {
		cfg[sv.ID] = sv
	}
	var out []raftChange
	remove := func(id, reason string) {
		out = append(out, raftChange{Kind: changeRemove, ID: id, Addr: cfg[id].Addr, Reason: reason})
		delete(cfg, id)
	}

	// 0. Revoked servers: every node refuses their connections, so a
	// revoked voter only counts towards the quorum size; it goes at once
	// (not after DeadVoterTimeout), and a standby takes its place below.
	for _, sv := range servers {
		if s.Revoked[sv.ID] && sv.ID != s.Self {
			remove(sv.ID, "revoked")
		}
	}

	// 1. Graceful leaves of non-voters.
	for _, sv := range servers {
		if _, left := s.Left[sv.ID]; left && sv.ID != s.Self && !sv.Voter {
			remove(sv.ID, "left")
		}
	}

	// 1b. On the stream, members (VoterNever) leave Raft: a non-voter
	// that gossips VoterNever is removed (a voter is demoted first, below);
	// of the alive voter-capable non-voters the best-ranked Standbys stay,
	// the others follow the stream.
	if s.Stream {
		var standbys []Member
		for _, m := range members {
			sv, in := cfg[m.ID]
			if _, ok := alive[m.ID]; !ok || !in || sv.Voter || m.ID == s.Self || !followsStream(m.Meta) {
				continue
			}
			if VoterPreferenceOf(m.Meta) == VoterNever {
				remove(m.ID, "member follows the stream (voter=never)")
			} else {
				standbys = append(standbys, m)
			}
		}
		for i, m := range rankVoterCandidates(standbys) {
			if i >= s.Standbys {
				remove(m.ID, fmt.Sprintf("more than %d standbys: follows the stream", s.Standbys))
			}
		}
	}

	// 2. Identity reuse and moved addresses.
	for _, m := range members {
		am, ok := alive[m.ID]
		if !ok || m.ID == s.Self {
			continue
		}
		if _, left := s.Left[m.ID]; left {
			continue
		}
		for _, sv := range servers {
			old, still := cfg[sv.ID]
			if !still || old.ID == m.ID || old.ID == s.Self || old.Addr != am.RaftAddr {
				continue
			}
			if other, ok := alive[old.ID]; ok && other.RaftAddr == old.Addr {
				continue // both claim the address; leave it to gossip to settle
			}
			remove(old.ID, "address "+old.Addr+" now belongs to "+m.ID)
		}
		if sv, ok := cfg[m.ID]; ok && sv.Addr != am.RaftAddr {
			out = append(out, raftChange{Kind: changeUpdateAddr, ID: m.ID, Addr: am.RaftAddr, Voter: sv.Voter, Reason: "moved from " + sv.Addr})
			sv.Addr = am.RaftAddr
			cfg[m.ID] = sv
		}
	}

	// 3. Joins. On the stream only standbys join: voter-capable members,
	// best-ranked first, while fewer than Standbys alive ones are in.
	slots, joiners := 0, members
	if s.Stream {
		slots = s.Standbys
		for _, m := range members {
			if sv, in := cfg[m.ID]; in && !sv.Voter && live[m.ID] && m.ID != s.Self && VoterPreferenceOf(m.Meta) != VoterNever && followsStream(m.Meta) {
				slots--
			}
		}
		joiners = append(rankVoterCandidates(slices.Clone(members)), neverMembers(members)...)
	}
	for _, m := range joiners {
		am, ok := alive[m.ID]
		if !ok {
			continue
		}
		if _, left := s.Left[m.ID]; left {
			continue
		}
		if _, in := cfg[m.ID]; in {
			continue
		}
		if s.Stream && followsStream(m.Meta) {
			if VoterPreferenceOf(m.Meta) == VoterNever || slots <= 0 {
				continue // follows the stream
			}
			slots--
		}
		if !s.Stream && s.StreamPending && followsStream(m.Meta) && VoterPreferenceOf(m.Meta) == VoterNever {
			continue // waits for the stream without Raft
		}
		out = append(out, raftChange{Kind: changeAddNonvoter, ID: m.ID, Addr: am.RaftAddr, Reason: "joined"})
		cfg[m.ID] = ServerInfo{ID: m.ID, Addr: am.RaftAddr}
	}

	// Promotion candidates: caught-up alive non-voters that do not refuse
	// to vote, VoterAlways first, then lowest id. A non-voter added this
	// round is not caught up yet.
	var cands []Member
	for _, m := range members {
		sv, in := cfg[m.ID]
		if am, ok := alive[m.ID]; ok && in && !sv.Voter && s.CaughtUp[m.ID] {
			cands = append(cands, am)
		}
	}
	var candidates []string
	for _, m := range rankVoterCandidates(cands) {
		candidates = append(candidates, m.ID)
	}
	promote := func(reason string) bool {
		if len(candidates) == 0 {
			return false
		}
		id := candidates[0]
		candidates = candidates[1:]
		sv := cfg[id]
		out = append(out, raftChange{Kind: changePromote, ID: id, Addr: sv.Addr, Reason: reason})
		sv.Voter = true
		cfg[id] = sv
		return true
	}

	// 4. Servers gone for longer than DeadVoterTimeout.
	if s.DeadVoterTimeout > 0 {
		for _, sv := range servers {
			cur, in := cfg[sv.ID]
			if !in || live[sv.ID] {
				continue
			}
			since, ok := s.GoneSince[sv.ID]
			if !ok || s.Now.Sub(since) < s.DeadVoterTimeout {
				continue
			}
			gone := fmt.Sprintf("not seen alive for %v", s.Now.Sub(since))
			switch {
			case !cur.Voter:
				remove(sv.ID, gone)
			case countVoters(cfg) > s.MaxVoters:
				// A replacement was promoted in an earlier round whose
				// removal failed: remove without promoting again.
				remove(sv.ID, gone)
			case promote("replaces " + sv.ID):
				remove(sv.ID, gone)
			}
		}
	}

	// 5. Voters that ask never to vote step aside for a replacement. The
	// leader itself is left alone: the next leader demotes it.
	for _, m := range members {
		sv, in := cfg[m.ID]
		if !in || !sv.Voter || m.ID == s.Self || VoterPreferenceOf(m.Meta) != VoterNever {
			continue
		}
		if _, ok := alive[m.ID]; !ok {
			continue
		}
		if countVoters(cfg) > s.MaxVoters || promote("replaces "+m.ID+" (voter=never)") {
			out = append(out, raftChange{Kind: changeDemote, ID: m.ID, Addr: sv.Addr, Reason: "voter=never"})
			sv.Voter = false
			cfg[m.ID] = sv
		}
	}

	// 6. Fill up to MaxVoters.
	voters := countVoters(cfg)
	for voters < s.MaxVoters && promote("fewer voters than MaxVoters") {
		voters++
	}
	return out
}

// neverMembers returns the members that gossip VoterNever, in order.
func neverMembers(ms []Member) []Member {
	var out []Member
	for _, m := range ms {
		if VoterPreferenceOf(m.Meta) == VoterNever {
			out = append(out, m)
		}
	}
	return out
}

func countVoters(cfg map[string]ServerInfo) int {
	n := 0
	for _, sv := range cfg {
		if sv.Voter {
			n++
		}
	}
	return n
}

// quorum is the majority of n voters.
func quorum(n int) int { return n/2 + 1 }

// reconcileLoop runs on the leader until ctx ends: once at once, then on
// membership events (coalesced by a one-slot signal) and every
// ReconcileInterval.
func (g *ControlGroup) reconcileLoop(ctx context.Context) {
	goneSince := map[string]time.Time{} // restarted at every term: conservative
	t := time.NewTicker(g.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		if err := g.reconcileOnce(ctx, goneSince); err != nil && ctx.Err() == nil {
			g.log.Warn("cluster: reconcile", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.reconcileSig:
		}
	}
}

func (g *ControlGroup) reconcileOnce(ctx context.Context, goneSince map[string]time.Time) error {
	if g.peers == nil {
		return nil
	}
	servers, err := g.Servers()
	if err != nil {
		return err
	}
	members := g.peers.Members()
	proven := g.proveMembers(ctx, members)
	now := time.Now()
	live := map[string]bool{g.cfg.NodeID: true}
	for _, m := range members {
		if proven != nil && !proven[m.ID] {
			continue
		}
		if m.State.Up() {
			live[m.ID] = true
		}
	}
	inCfg := map[string]bool{}
	for _, sv := range servers {
		inCfg[sv.ID] = true
		if live[sv.ID] {
			delete(goneSince, sv.ID)
		} else if _, ok := goneSince[sv.ID]; !ok {
			goneSince[sv.ID] = now
		}
	}
	for id := range goneSince {
		if !inCfg[id] {
			delete(goneSince, id)
		}
	}
	g.pruneLeft(servers, members)
	var revoked map[string]bool
	if g.revocation != nil {
		for _, sv := range servers {
			if g.cfg.Revoked(Peer{ID: sv.ID, Role: RoleNode}) != nil {
				if revoked == nil {
					revoked = map[string]bool{}
				}
				revoked[sv.ID] = true
			}
		}
	}
	st := reconcileState{
		Self:             g.cfg.NodeID,
		Servers:          servers,
		Members:          members,
		Left:             g.leftSnapshot(members),
		GoneSince:        goneSince,
		Now:              now,
		DeadVoterTimeout: g.cfg.DeadVoterTimeout,
		MaxVoters:        g.cfg.MaxVoters,
		Stream:           g.cfg.streamActive(),
		StreamPending:    g.cfg.streamPending(),
		Standbys:         g.cfg.standbys(),
		Proven:           proven,
		Revoked:          revoked,
	}
	// Probe non-voters only when a promotion could happen.
	if plan := planReconcile(st); needsCandidates(st, plan) {
		st.CaughtUp = g.probeCaughtUp(ctx, servers, members)
	}
	for _, c := range planReconcile(st) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := g.applyChange(c); err != nil {
			return fmt.Errorf("%v: %w", c, err)
		}
		g.log.Info("cluster: raft configuration change", "change", c.String())
		if c.Kind == changePromote || c.Kind == changeRemove {
			// A standby promoted (or removed) leaves a slot the next round
			// fills from the stream followers, at once.
			signal(g.reconcileSig)
		}
	}
	return nil
}

// needsCandidates reports whether promotion candidates could change the plan.
func needsCandidates(st reconcileState, plan []raftChange) bool {
	cfg := map[string]bool{}
	for _, sv := range st.Servers {
		cfg[sv.ID] = sv.Voter
	}
	for _, c := range plan {
		switch c.Kind {
		case changeRemove:
			delete(cfg, c.ID)
		case changeAddNonvoter:
			cfg[c.ID] = false
		}
	}
	pref := map[string]VoterPreference{}
	for _, m := range st.Members {
		pref[m.ID] = VoterPreferenceOf(m.Meta)
	}
	voters, nonvoters, never := 0, 0, false
	for id, v := range cfg {
		switch {
		case v:
			voters++
			never = never || (pref[id] == VoterNever && id != st.Self)
		case pref[id] != VoterNever:
			nonvoters++
		}
	}
	if nonvoters == 0 {
		return false
	}
	return voters < st.MaxVoters || never || (st.DeadVoterTimeout > 0 && len(st.GoneSince) > 0)
}

// probeCaughtUp asks alive non-voters for their applied index.
func (g *ControlGroup) probeCaughtUp(ctx context.Context, servers []ServerInfo, members []Member) map[string]bool {
	alive := map[string]bool{}
	for _, m := range members {
		if m.State == StateAlive {
			alive[m.ID] = true
		}
	}
	commit := g.commitIndex()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]bool{}
	)
	for _, sv := range servers {
		if sv.Voter || !alive[sv.ID] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := g.statusOf(ctx, sv.Addr)
			if err != nil || st.ID != sv.ID {
				g.log.Debug("cluster: status probe failed", "peer", sv.ID, "err", err)
				return
			}
			mu.Lock()
			out[sv.ID] = st.LastIndex+g.cfg.CatchUpLag >= commit
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (g *ControlGroup) applyChange(c raftChange) error {
	id, addr, to := raft.ServerID(c.ID), raft.ServerAddress(c.Addr), g.cfg.RPCTimeout
	r := g.rft()
	if r == nil {
		return ErrNotLeader
	}
	var f raft.IndexFuture
	switch c.Kind {
	case changeAddNonvoter:
		f = r.AddNonvoter(id, addr, 0, to)
	case changePromote:
		return g.mapRaftErr(g.waitVoteGained(r, r.AddVoter(id, addr, 0, to)))
	case changeDemote:
		f = r.DemoteVoter(id, 0, to)
	case changeRemove:
		f = r.RemoveServer(id, 0, to)
	case changeUpdateAddr:
		if c.Voter {
			return g.mapRaftErr(g.waitVoteGained(r, r.AddVoter(id, addr, 0, to)))
		} else {
			f = r.AddNonvoter(id, addr, 0, to)
		}
	default:
		return fmt.Errorf("cluster: unknown change kind %d", c.Kind)
	}
	return g.mapRaftErr(g.wait(f))
}

// waitVoteGained waits for a configuration change that gives a server a
// vote, appending barrier entries while it does not commit.
//
// hashicorp/raft (v1.7.3, appendConfigurationEntry) wakes the replicators
// for the new configuration entry before it installs that configuration in
// its commitment tracker. A non-voter that acknowledges the entry inside
// that window has its match index dropped (it had no vote yet), and the new
// configuration counts it at 0 until another entry reaches it. With one
// voter down — the case that promotes a replacement — the entry can then
// wait for a quorum it already has, for as long as the log stays quiet
// (TestPromotionAckRace). A barrier is that next entry: its
// acknowledgements count under the new configuration, and committing it
// commits the change. Nudges back off from nudgeFirst and stop after
// nudgeMax; an entry that cannot reach a quorum still ends with leadership.
func (g *ControlGroup) waitVoteGained(r *raft.Raft, f raft.Future) error {
	done := g.outcome(f)
	every := nudgeFirst
	t := time.NewTimer(every)
	defer t.Stop()
	for nudges := 0; ; {
		select {
		case err := <-done:
			return err
		case <-t.C:
		}
		if nudges++; nudges <= nudgeMax {
			g.log.Debug("cluster: configuration change not committed yet; appending a barrier", "nudge", nudges)
			r.Barrier(g.cfg.RPCTimeout) // not waited on: f's outcome is what counts
		}
		every *= 2
		t.Reset(every)
	}
}

// The barriers of waitVoteGained: the first after nudgeFirst, then after
// twice the previous wait, at most nudgeMax of them (the last ≈ 3 s in).
const (
	nudgeFirst = 100 * time.Millisecond
	nudgeMax   = 5
)

// removeServer runs on the leader: a graceful leave (args.Leave) or an
// operator removal.
func (g *ControlGroup) removeServer(ctx context.Context, args wire.RemoveArgs) error {
	servers, err := g.Servers()
	if err != nil {
		return err
	}
	var target *ServerInfo
	voters := 0
	for i := range servers {
		if servers[i].ID == args.ID {
			target = &servers[i]
		}
		if servers[i].Voter {
			voters++
		}
	}
	inc := args.Incarnation
	var members []Member
	if g.peers != nil {
		members = g.peers.Members()
	}
	if !args.Leave {
		for _, m := range members {
			if m.ID == args.ID {
				inc = m.Incarnation
			}
		}
	}
	g.markLeft(args.ID, inc)
	if target == nil {
		if args.Leave {
			return nil
		}
		return fmt.Errorf("%w: %q", ErrUnknownServer, args.ID)
	}
	if target.Voter {
		caught := g.probeCaughtUp(ctx, servers, members)
		var cands []Member
		for _, m := range members {
			if caught[m.ID] && m.ID != args.ID {
				cands = append(cands, m)
			}
		}
		var cand string
		if ranked := rankVoterCandidates(cands); len(ranked) > 0 {
			cand = ranked[0].ID
		}
		switch {
		case cand != "":
			for _, sv := range servers {
				if sv.ID == cand {
					if err := g.applyChange(raftChange{Kind: changePromote, ID: sv.ID, Addr: sv.Addr, Reason: "replaces " + args.ID}); err != nil {
						return err
					}
					g.log.Info("cluster: promoted replacement", "id", cand, "for", args.ID)
				}
			}
		case !args.Leave && voters-1 < quorum(g.cfg.MaxVoters):
			return fmt.Errorf("%w: removing %s leaves %d voters, quorum of %d is %d",
				ErrQuorumRisk, args.ID, voters-1, g.cfg.MaxVoters, quorum(g.cfg.MaxVoters))
		}
	}
	if err := g.applyChange(raftChange{Kind: changeRemove, ID: args.ID}); err != nil {
		return err
	}
	g.log.Info("cluster: removed server", "id", args.ID, "leave", args.Leave)
	signal(g.reconcileSig)
	return nil
}
