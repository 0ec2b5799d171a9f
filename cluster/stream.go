package cluster

// The committed-state stream (cluster version 5; docs/control-group.md,
// "The committed-state stream"). Members (VoterNever) stay out of Raft:
// they follow the entries a voter's FSM applied, over the authenticated
// control RPC (Control.Subscribe), and apply them to their own replica
// through the same FSM as Raft would (streamFSM, stream_fsm.go).
//
// The stream is pulled, not pushed: a subscriber asks for the entries
// after its applied index and the server answers at once when it has some,
// or holds the call up to StreamWait until it has. A server therefore
// queues nothing for a subscriber: what a slow subscriber has not asked
// for stays in the one shared ring (bounded in entries and bytes), and
// once the ring has moved past it the subscriber gets a snapshot (as a
// Kubernetes watch that is too old relists, or an etcd watch answers
// ErrCompacted). Each reply is bounded (StreamBatchBytes, snapshot chunks),
// and at most StreamMaxSubscribers calls are held at once: a server's
// memory does not grow with slow subscribers.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/rpc"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
	"github.com/tenurehq/tenure/internal/mutation"
)

// Stream defaults (ControlConfig's Stream fields when 0).
const (
	// DefaultStreamBuffer is how many applied entries a server keeps for
	// subscribers that resume.
	DefaultStreamBuffer = 4096
	// DefaultStreamBufferBytes bounds the data of those entries.
	DefaultStreamBufferBytes = 16 << 20
	// DefaultStreamMaxSubscribers bounds the Subscribe calls a server holds
	// at once; more are refused (the subscriber tries another voter).
	DefaultStreamMaxSubscribers = 1024
	// DefaultStreamWait is how long a server holds a Subscribe call that has
	// nothing new yet.
	DefaultStreamWait = 2 * time.Second
	// DefaultStreamBatchBytes bounds the entry data of one reply.
	DefaultStreamBatchBytes = 256 << 10
	// DefaultStreamMaxSnapshot bounds a snapshot served or received over the
	// stream.
	DefaultStreamMaxSnapshot = 512 << 20
	// streamChunk is the snapshot bytes of one reply (at most half of
	// MaxRPCMessage).
	streamChunk = 1 << 20
	// DefaultStreamStandbys is how many voter-capable Raft non-voters the
	// leader keeps once members follow the stream.
	DefaultStreamStandbys = 2
	// maxStreamWait caps a subscriber's requested wait.
	maxStreamWait = 30 * time.Second
)

// ErrStreamUnavailable: the peer does not serve the stream now (an older
// binary, cluster version 5 not active, not a Raft server, no leader known,
// its subscriber cap reached).
var ErrStreamUnavailable = errors.New("cluster: peer does not serve the stream")

// StreamStatus describes this node's part in the committed-state stream.
type StreamStatus struct {
	// Following: this node is a member that follows the stream when the
	// cluster version allows (VoterNever).
	Following bool
	// Active: entries or an up-to-date answer arrived from a server within
	// the last two waits.
	Active bool
	// Server is the address of the server followed last.
	Server string
	// Applied is this replica's stream index (its applied index).
	Applied uint64
	// ServerApplied and ServerCommit are the serving voter's applied and
	// commit indexes at its last reply.
	ServerApplied, ServerCommit uint64
	// LagEntries is how far this replica's applied index was behind the
	// serving voter's at its last reply (Raft indexes).
	LagEntries uint64
	// CaughtUp is the last time this replica had applied everything the
	// server had (zero: never). Behind is the time since then while behind
	// (or not hearing from a server), 0 when caught up.
	CaughtUp time.Time
	Behind   time.Duration
	// Counters of the subscriber side.
	Reconnects, Snapshots, Entries, BytesReceived uint64
	// Counters of the server side: Subscribe calls held now, entry and
	// snapshot bytes sent, calls refused (cap, not serving).
	Subscribers                   int64
	BytesSent, Refused, SnapsSent uint64
}

// streamServerStats are the server side's counters.
type streamServerStats struct {
	subs                        atomic.Int64
	calls                       atomic.Uint64 // Subscribe calls received
	bytesSent, refused, snapped atomic.Uint64
}

// streamServing reports why this node does not serve the stream now, ""
// when it does.
func (g *ControlGroup) streamServing() (wire.ReplyCode, string) {
	if why := g.streamServingWhy(); why != "" {
		if g.rec != nil && g.cfg.AppliedIndex != nil && (g.cfg.StreamActive == nil || !g.cfg.StreamActive()) {
			return wire.CodeStreamNotActive, why
		}
		return wire.CodeUnsupported, why
	}
	return wire.CodeOK, ""
}

func (g *ControlGroup) streamServingWhy() string {
	switch {
	case g.rec == nil || g.cfg.AppliedIndex == nil:
		return "no stream on this node"
	case g.cfg.StreamActive == nil || !g.cfg.StreamActive():
		if g.cfg.StreamPending != nil && g.cfg.StreamPending() {
			return streamPendingMsg
		}
		return "the cluster version does not have members on the stream yet"
	case g.cfg.Voter == VoterNever:
		return "a member does not serve the stream"
	}
	select {
	case <-g.closing:
		return "closing"
	default:
	}
	if _, id := g.leaderWithID(); id == "" {
		return "no leader known"
	}
	conf, _ := g.latestConfiguration()
	for _, s := range conf.Servers {
		if string(s.ID) == g.cfg.NodeID {
			return ""
		}
	}
	return "not a raft server"
}

// streamHeader fills the server's view into r.
func (g *ControlGroup) streamHeader(r *wire.SubscribeReply) {
	r.Applied = g.rec.lastIndex()
	r.Commit = g.commitIndex()
	r.Term = g.currentTerm()
	addr, id := g.leaderWithID()
	r.Leader, r.LeaderAddr = string(id), string(addr)
	voters := g.voterAddrs()
	r.Voters, r.VoterAddrs = nil, nil
	for _, id := range slices.Sorted(mapKeys(voters)) {
		r.Voters = append(r.Voters, id)
		r.VoterAddrs = append(r.VoterAddrs, voters[id])
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Subscribe serves the committed-state stream: the entries this node's
// FSM applied after args.From, or a snapshot chunk (see stream.go).
func (s *controlRPC) Subscribe(args *wire.SubscribeArgs, reply *wire.SubscribeReply) error {
	g := s.g
	g.streamStats.calls.Add(1)
	if args == nil || args.Offset < 0 || args.MaxBytes < 0 || args.Wait < 0 {
		reply.Code, reply.Msg = wire.CodeBadRequest, "bad subscribe arguments"
		return nil
	}
	if code, why := g.streamServing(); why != "" {
		g.streamStats.refused.Add(1)
		gometrics.IncrCounter([]string{"stream", "drops"}, 1)
		reply.Code, reply.Msg = code, why
		return nil
	}
	if g.streamStats.subs.Add(1) > int64(g.cfg.StreamMaxSubscribers) {
		g.streamStats.subs.Add(-1)
		g.streamStats.refused.Add(1)
		gometrics.IncrCounter([]string{"stream", "drops"}, 1)
		reply.Code, reply.Msg = wire.CodeUnsupported, fmt.Sprintf("subscriber cap %d reached", g.cfg.StreamMaxSubscribers)
		return nil
	}
	gometrics.SetGauge([]string{"stream", "subscribers"}, float32(g.streamStats.subs.Load()))
	defer func() {
		gometrics.SetGauge([]string{"stream", "subscribers"}, float32(g.streamStats.subs.Add(-1)))
	}()
	if args.SnapID != 0 {
		snap := g.rec.cachedSnapshot(args.SnapID)
		if snap == nil || args.Offset > int64(len(snap.data)) {
			reply.Code, reply.Msg = wire.CodeStreamReset, "snapshot gone"
			return nil
		}
		g.snapshotChunk(snap, args.Offset, reply)
		g.streamHeader(reply)
		return nil
	}
	maxBytes := g.cfg.StreamBatchBytes
	if args.MaxBytes > 0 && args.MaxBytes < maxBytes {
		maxBytes = args.MaxBytes
	}
	wait := min(args.Wait, maxStreamWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		// A leader change ends the wait at once: members learn the new
		// leader from the reply (their renewals and proposals go there).
		leaderChange := g.leaderChanged()
		entries, pos, wake := g.rec.read(args.From, maxBytes)
		if _, id := g.leaderWithID(); string(id) != args.Leader && pos == posEntries && len(entries) == 0 {
			g.streamHeader(reply) // the subscriber's leader is out of date
			return nil
		}
		switch {
		case pos == posSnapshot:
			snap, err := g.rec.snapshotFor(g.cfg.StreamMaxSnapshot)
			if err != nil {
				reply.Code, reply.Msg = wire.CodeError, err.Error()
				return nil
			}
			g.snapshotChunk(snap, 0, reply)
			g.streamHeader(reply)
			return nil
		case len(entries) > 0:
			reply.Entries = entries
			n := 0
			for _, e := range entries {
				n += len(e.Data)
			}
			g.streamStats.bytesSent.Add(uint64(n))
			gometrics.IncrCounter([]string{"stream", "bytes_sent"}, float32(n))
			g.streamHeader(reply)
			return nil
		}
		select {
		case <-wake:
		case <-leaderChange:
			g.streamHeader(reply)
			return nil
		case <-timer.C:
			g.streamHeader(reply)
			return nil
		case <-g.closing:
			reply.Code, reply.Msg = wire.CodeClosed, "closing"
			return nil
		}
	}
}

func (g *ControlGroup) snapshotChunk(snap *streamSnapshot, off int64, r *wire.SubscribeReply) {
	size := min(streamChunk, g.cfg.MaxRPCMessage/2)
	end := min(off+int64(size), int64(len(snap.data)))
	r.SnapID, r.SnapIndex, r.SnapTotal, r.Offset = snap.id, snap.index, int64(len(snap.data)), off
	r.Chunk = snap.data[off:end]
	g.streamStats.bytesSent.Add(uint64(end - off))
	gometrics.IncrCounter([]string{"stream", "bytes_sent"}, float32(end-off))
	if off == 0 {
		g.streamStats.snapped.Add(1)
	}
}

// streamFollower is a member's subscriber loop.
type streamFollower struct {
	g    *ControlGroup
	pool *rpcPool

	mu         sync.Mutex
	server     string
	leader     string
	leaderAddr string
	term       uint64
	voters     []ServerInfo // from the last reply, sorted by id
	heard      time.Time    // last reply
	caughtUp   time.Time
	srvApplied uint64
	srvCommit  uint64
	// belowSince is when a voter first refused the stream as below its
	// version (belowStream); zero until then.
	belowSince time.Time

	reconnects, snapshots, entries, bytes atomic.Uint64
}

func newStreamFollower(g *ControlGroup, stream StreamLayer) *streamFollower {
	return &streamFollower{g: g, pool: newRPCPool(stream, g.cfg.MaxRPCMessage)}
}

// needStream reports whether this node follows the stream now: a member
// (VoterNever) always; a voter-capable node while it is out of Raft — not
// in the latest configuration it knows, or a non-voter no leader has
// contacted for 3·ElectionTimeout (a standby removed without hearing it).
// A voter never does.
func (g *ControlGroup) needStream() bool {
	if g.follow == nil {
		return false
	}
	if g.cfg.Voter == VoterNever {
		return true
	}
	if g.isRaftLeader() {
		return false
	}
	conf, _ := g.latestConfiguration()
	for _, s := range conf.Servers {
		if string(s.ID) == g.cfg.NodeID {
			if s.Suffrage == raft.Voter {
				return false
			}
			return time.Since(g.lastContact()) > 3*g.cfg.ElectionTimeout
		}
	}
	return true
}

// errNotNeeded ends a session: this node is (back) in Raft.
var errNotNeeded = errors.New("cluster: in raft: the stream is not needed")

// streamLeader returns the leader the stream last named, if it was heard
// from recently.
func (f *streamFollower) streamLeader() (id, addr string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == "" || time.Since(f.heard) > 2*f.g.cfg.StreamWait+f.g.cfg.RPCTimeout {
		return "", "", false
	}
	return f.leader, f.leaderAddr, true
}

func (f *streamFollower) streamVoters() []ServerInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.voters)
}

// run follows the stream until the group closes: one server at a time,
// the next candidate after a failure, with a backoff.
func (f *streamFollower) run() {
	g := f.g
	defer f.pool.close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-g.closing
		cancel()
	}()
	backoff := 50 * time.Millisecond
	var failed string
	for ctx.Err() == nil {
		if !g.needStream() {
			t := time.NewTimer(g.cfg.StreamWait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		cands := f.candidates(failed)
		var err error
		progressed := false
		if len(cands) == 0 {
			err = errors.New("no stream server known")
		} else {
			f.mu.Lock()
			f.server = cands[0]
			f.mu.Unlock()
			progressed, err = f.session(ctx, cands[0])
			failed = cands[0]
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotNeeded) {
			continue
		}
		f.reconnects.Add(1)
		gometrics.IncrCounter([]string{"stream", "reconnects"}, 1)
		if progressed {
			backoff = 50 * time.Millisecond
		}
		lvl := g.log.Debug
		if !errors.Is(err, ErrStreamUnavailable) && progressed {
			lvl = g.log.Info
		}
		lvl("cluster: stream interrupted; resuming", "server", failed, "applied", g.rec.lastIndex(), "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// candidates orders the servers to try: the voters the stream named last
// (else those of the Raft configuration this node knows, else the
// voter-capable peers gossip lists), followers first in an order that
// spreads members over voters (a rendezvous hash of this node's and the
// voter's ids), the leader last; failed goes to the end.
func (f *streamFollower) candidates(failed string) []string {
	g := f.g
	type cand struct {
		addr   string
		leader bool
		h      uint64
	}
	var cs []cand
	seen := map[string]bool{}
	leaderID, _, _ := f.streamLeader()
	add := func(id, addr string) {
		if addr == "" || seen[addr] || id == g.cfg.NodeID || addr == g.addr {
			return
		}
		seen[addr] = true
		h := fnv.New64a()
		_, _ = h.Write([]byte(g.cfg.NodeID + "\x00" + id))
		cs = append(cs, cand{addr: addr, leader: id == leaderID, h: h.Sum64()})
	}
	for _, v := range f.streamVoters() {
		add(v.ID, v.Addr)
	}
	if len(cs) == 0 {
		for id, addr := range g.voterAddrs() {
			add(id, addr)
		}
	}
	if len(cs) == 0 && g.peers != nil {
		for _, m := range g.peers.Members() {
			if m.State == StateAlive && VoterPreferenceOf(m.Meta) != VoterNever {
				add(m.ID, m.RaftAddr)
			}
		}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		af, bf := a.addr == failed, b.addr == failed
		switch {
		case af != bf:
			if af {
				return 1
			}
			return -1
		case a.leader != b.leader:
			if a.leader {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(b.h, a.h), cmp.Compare(a.addr, b.addr))
	})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.addr
	}
	return out
}

// session follows the stream from addr until an error; progressed reports
// whether anything arrived.
func (f *streamFollower) session(ctx context.Context, addr string) (progressed bool, err error) {
	g := f.g
	var (
		snap      []byte
		snapID    uint64
		snapIndex uint64
	)
	if mutation.On(mutation.StreamResumeSkips) && f.reconnects.Load() > 0 {
		// Mutation: resume from the server's applied index, not ours.
		var r wire.SubscribeReply
		cctx, cancel := context.WithTimeout(ctx, g.cfg.RPCTimeout)
		err := f.pool.call(cctx, addr, "Control.Subscribe", &wire.SubscribeArgs{From: g.rec.lastIndex()}, &r)
		cancel()
		if err == nil && r.Code == wire.CodeOK {
			g.rec.skipTo(r.Applied)
		}
	}
	for {
		f.mu.Lock()
		known := f.leader
		f.mu.Unlock()
		args := wire.SubscribeArgs{From: g.rec.lastIndex(), SnapID: snapID, Offset: int64(len(snap)), Wait: g.cfg.StreamWait, MaxBytes: g.cfg.StreamBatchBytes, Leader: known}
		var reply wire.SubscribeReply
		cctx, cancel := context.WithTimeout(ctx, g.cfg.StreamWait+g.cfg.RPCTimeout)
		err := f.pool.call(cctx, addr, "Control.Subscribe", &args, &reply)
		cancel()
		if err != nil {
			if isNoMethod(err) {
				// An older binary: the cluster is below version 5.
				f.belowStream()
				return progressed, fmt.Errorf("%w: %s: %v", ErrStreamUnavailable, addr, err)
			}
			return progressed, fmt.Errorf("cluster: stream from %s: %w", addr, err)
		}
		switch reply.Code {
		case wire.CodeOK:
		case wire.CodeStreamReset:
			snap, snapID = nil, 0
			continue
		case wire.CodeStreamNotActive:
			if !strings.Contains(reply.Msg, streamPendingMsg) {
				f.belowStream()
			}
			return progressed, fmt.Errorf("%w: %s: %s", ErrStreamUnavailable, addr, reply.Msg)
		case wire.CodeUnsupported, wire.CodeClosed:
			return progressed, fmt.Errorf("%w: %s: %s", ErrStreamUnavailable, addr, reply.Msg)
		default:
			return progressed, fmt.Errorf("cluster: stream from %s: code %d: %s", addr, reply.Code, reply.Msg)
		}
		if reply.SnapID != 0 {
			switch {
			case reply.SnapTotal < 0 || reply.SnapTotal > int64(g.cfg.StreamMaxSnapshot):
				return progressed, fmt.Errorf("%w: %s offers %d bytes, the limit is %d", ErrStreamSnapshot, addr, reply.SnapTotal, g.cfg.StreamMaxSnapshot)
			case snapID == 0 && reply.Offset == 0:
				snapID, snapIndex = reply.SnapID, reply.SnapIndex
				snap = make([]byte, 0, min(reply.SnapTotal, 64<<20))
			case reply.SnapID != snapID || reply.Offset != int64(len(snap)) || reply.SnapIndex != snapIndex:
				return progressed, fmt.Errorf("%w: %s sent snapshot %d at offset %d, expected %d at %d", ErrStreamGap, addr, reply.SnapID, reply.Offset, snapID, len(snap))
			}
			if int64(len(snap)+len(reply.Chunk)) > reply.SnapTotal || (len(reply.Chunk) == 0 && int64(len(snap)) < reply.SnapTotal) {
				return progressed, fmt.Errorf("%w: %s sent a bad snapshot chunk", ErrStreamSnapshot, addr)
			}
			snap = append(snap, reply.Chunk...)
			f.bytes.Add(uint64(len(reply.Chunk)))
			gometrics.IncrCounter([]string{"stream", "bytes_received"}, float32(len(reply.Chunk)))
			progressed = true
			if int64(len(snap)) == reply.SnapTotal {
				if err := g.rec.restoreStream(snap, snapIndex); err != nil {
					return progressed, err
				}
				f.snapshots.Add(1)
				gometrics.IncrCounter([]string{"stream", "snapshots_received"}, 1)
				g.log.Info("cluster: stream snapshot restored", "server", addr, "index", snapIndex, "bytes", len(snap))
				snap, snapID = nil, 0
			}
			f.note(addr, &reply)
			continue
		}
		n, err := g.rec.applyStream(reply.Entries)
		f.entries.Add(uint64(n))
		nb := 0
		for _, e := range reply.Entries[:n] {
			nb += len(e.Data)
		}
		f.bytes.Add(uint64(nb))
		gometrics.IncrCounter([]string{"stream", "bytes_received"}, float32(nb))
		if n > 0 {
			progressed = true
		}
		if err != nil {
			return progressed, err
		}
		f.note(addr, &reply)
		if g.rft() != nil {
			g.dropRaft()
		}
		if snapID == 0 && !g.needStream() {
			return progressed, errNotNeeded
		}
	}
}

// belowStream is told that a voter does not serve the stream because the
// cluster is below version 5: a member without Raft starts it, to be a
// Raft non-voter as before (raftless.go) — once the refusals have lasted
// belowStreamGrace. A freshly bootstrapped cluster records its version
// moments after its first node registers: before the grace, every member
// started at the same time as the voters started Raft, was added to the
// configuration as a non-voter, had the whole log replicated to it, and
// was removed again a moment later — at N = 100 on two cores, 97 Raft
// instances and 194 configuration changes while the cluster formed
// (docs/benchmarks.md). In a cluster that stays below version 5 (a
// rolling upgrade), a new member starts Raft the grace later than before.
func (f *streamFollower) belowStream() {
	g := f.g
	if g.rft() != nil || !g.cfg.lazyRaft() || g.cfg.StreamActive() {
		return
	}
	f.mu.Lock()
	now := time.Now()
	if f.belowSince.IsZero() {
		f.belowSince = now
	}
	waited := now.Sub(f.belowSince)
	f.mu.Unlock()
	if waited < belowStreamGrace(g.cfg.StreamWait) {
		return
	}
	if err := g.startRaft(); err != nil && !errors.Is(err, ErrControlClosed) {
		g.log.Warn("cluster: start raft below the stream's version", "err", err)
	}
}

// streamPendingMsg is the refusal of a voter whose cluster has recorded
// no version yet (ControlConfig.StreamPending): a fresh cluster, which
// records the newest version its first registered nodes speak moments
// later. A member told so keeps asking and does not start Raft; the text
// is free (the reply's Msg), so an older voter never sends it.
const streamPendingMsg = "the cluster has recorded no version yet"

// belowStreamGrace is how long a member keeps asking for the stream, while
// voters refuse it as below version 5, before it starts Raft to be a
// non-voter: two StreamWaits (4 s by default).
func belowStreamGrace(streamWait time.Duration) time.Duration { return 2 * streamWait }

// isNoMethod reports net/rpc's "can't find service/method" error: an
// older binary without Control.Subscribe.
func isNoMethod(err error) bool {
	var se rpc.ServerError
	return errors.As(err, &se) && strings.Contains(string(se), "can't find")
}

// note records a server's reply.
func (f *streamFollower) note(addr string, r *wire.SubscribeReply) {
	now := time.Now()
	applied := f.g.rec.lastIndex()
	f.mu.Lock()
	changed := f.leader != r.Leader
	f.server = addr
	f.heard = now
	f.leader, f.leaderAddr, f.term = r.Leader, r.LeaderAddr, r.Term
	f.srvApplied, f.srvCommit = r.Applied, r.Commit
	if applied >= r.Applied && r.SnapID == 0 {
		f.caughtUp = now
	}
	var lag uint64
	if r.Applied > applied {
		lag = r.Applied - applied
	}
	gometrics.SetGauge([]string{"stream", "lag_entries"}, float32(lag))
	if !f.caughtUp.IsZero() {
		gometrics.SetGauge([]string{"stream", "lag_seconds"}, float32(now.Sub(f.caughtUp).Seconds()))
	}
	if len(r.Voters) == len(r.VoterAddrs) && len(r.Voters) > 0 {
		vs := make([]ServerInfo, len(r.Voters))
		for i := range r.Voters {
			vs[i] = ServerInfo{ID: r.Voters[i], Addr: r.VoterAddrs[i], Voter: true}
		}
		f.voters = vs
	}
	f.mu.Unlock()
	if changed {
		f.g.noteLeaderChange()
	}
}

// StreamStatus reports this node's part in the committed-state stream.
func (g *ControlGroup) StreamStatus() StreamStatus {
	st := StreamStatus{
		Subscribers: g.streamStats.subs.Load(),
		BytesSent:   g.streamStats.bytesSent.Load(),
		Refused:     g.streamStats.refused.Load(),
		SnapsSent:   g.streamStats.snapped.Load(),
	}
	if g.rec != nil {
		st.Applied = g.rec.lastIndex()
	}
	f := g.follow
	if f == nil {
		return st
	}
	st.Following = g.needStream()
	st.Reconnects, st.Snapshots, st.Entries, st.BytesReceived = f.reconnects.Load(), f.snapshots.Load(), f.entries.Load(), f.bytes.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	st.Server = f.server
	st.Active = !f.heard.IsZero() && now.Sub(f.heard) < 2*g.cfg.StreamWait+g.cfg.RPCTimeout
	st.ServerApplied, st.ServerCommit = f.srvApplied, f.srvCommit
	if f.srvApplied > st.Applied {
		st.LagEntries = f.srvApplied - st.Applied
	}
	st.CaughtUp = f.caughtUp
	if !f.caughtUp.IsZero() {
		// An idle server answers every StreamWait: silence for longer
		// counts as lag too.
		if since := now.Sub(f.caughtUp); st.LagEntries > 0 || since > g.cfg.StreamWait+time.Second {
			st.Behind = since
		}
	}
	return st
}

// noteLeaderChange wakes calls that watch the leader (whileLeader).
func (g *ControlGroup) noteLeaderChange() {
	g.leaderMu.Lock()
	close(g.leaderChange)
	g.leaderChange = make(chan struct{})
	g.leaderMu.Unlock()
}
