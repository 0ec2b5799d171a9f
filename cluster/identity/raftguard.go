package identity

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/internal/raftwire"
)

// The Raft guard sits between an authenticated connection and
// hashicorp/raft's NetworkTransport. It decodes each message the peer sends
// (the transport's framing: one type byte, a msgpack request, and for
// InstallSnapshot the snapshot's bytes), checks it, and only then passes
// the very same bytes on to the transport. Writes (raft's responses) go
// straight to the connection. A message that fails a check closes the
// connection; Raft sees a dropped connection, as after a network fault.
//
// Before the guard, the mux lets only a node (voter-capable) certificate
// open a Raft stream at all (cluster/rpc/mux.go): a member's or an
// operator's is refused on the first Raft byte. The guard's checks (decideRaft, a pure
// function of the message and this node's view of Raft):
//   - the header's server id is the id the peer proved (its certificate):
//     no node speaks for another;
//   - RequestVote, RequestPreVote, AppendEntries, InstallSnapshot and
//     TimeoutNow come only from a voter of the latest configuration this
//     node knows (committed or not, as hashicorp/raft itself uses it). Raft
//     non-voters and servers outside the configuration never legitimately
//     send these to anyone, so this holds in mixed-version clusters too.
//     Two exceptions: before this node has any configuration (bootstrap, or
//     a fresh node being added) every node certificate may, since the
//     configuration arrives in these messages; and the leader whose log
//     this node accepted at a term may go on sending at that term after it
//     appended its own removal (it must commit that entry);
//   - AppendEntries and InstallSnapshot come only from the leader this
//     node would accept at that term: the first voter whose log it
//     accepted at a term is that term's leader (Raft elects at most one),
//     another id at the same term is refused, a higher term from a voter
//     is a legitimate new leader, and a lower term passes (raft answers it
//     with its own term and changes nothing);
//   - TimeoutNow (start an election now) comes only from the leader this
//     node follows: hashicorp/raft acts on it from anyone;
//   - every configuration a message carries — an InstallSnapshot's, and
//     every LogConfiguration entry of an AppendEntries — decodes and is
//     plausible (validateRaftConfiguration): hashicorp/raft's decoder
//     panics on a malformed one, killing the process. Entries of the
//     deprecated peer-set types (raft protocol < 3, never written here)
//     and version-0 snapshots are refused;
//   - a message is at most maxRaftMessage bytes (the decoder grows slices
//     as bytes arrive, so a large declared length costs nothing up front).
//
// What it cannot check: a voter with a valid certificate can still lie
// (Raft tolerates crashes, not lies); docs/security.md says what that
// means. A node that missed the configuration entry that made a new voter
// (a lagging follower, a voter or standby that was down while the voters
// changed) would refuse that voter's log for as long as it leads; the
// vouch round (cluster/raftvouch.go) lets it in on the word of a voter this
// node knows (docs/security.md, "Roles").

const (
	// maxRaftMessage bounds one Raft message without its snapshot bytes:
	// at most MaxAppendEntries (64) entries of at most
	// ledger.MaxCommandSize (16 MiB) each would not fit, but the batcher
	// keeps entries at ≤ 1 MiB, so 64 MiB is generous.
	maxRaftMessage = 64 << 20

	// Plausibility bounds of a configuration (validateRaftConfiguration):
	// far above any control group (3–5 voters and a few standbys; before
	// cluster version 5 every member is a non-voter, 100s of them).
	maxConfigServers = 1 << 14
	maxConfigField   = 1 << 10 // bytes of one server id or address
)

// errRaftRefused marks a message the guard refused.
var errRaftRefused = errors.New("cluster: raft message refused")

// raftRefusal is a refused message: Reason is the metric label
// (cluster.raft.refused{reason}).
type raftRefusal struct {
	Reason string
	Msg    string
}

func (e *raftRefusal) Error() string { return errRaftRefused.Error() + ": " + e.Msg }
func (e *raftRefusal) Unwrap() error { return errRaftRefused }

// Refuse is a refusal of the guard (or of the mux, before the guard) with
// its metric label reason; it wraps the guard's refusal error.
func Refuse(reason, format string, args ...any) error {
	return &raftRefusal{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// The refusal reasons.
const (
	RefusedRole      = "role"       // not a node certificate (the mux)
	refusedID        = "id"         // header id is not the proven id
	refusedNotVoter  = "not_voter"  // not a voter of the latest configuration
	refusedNotLeader = "not_leader" // not the leader of that term / the followed leader
	refusedConfig    = "config"     // a carried configuration is malformed or implausible
	refusedMalformed = "malformed"  // undecodable message, unknown type
	refusedTooLarge  = "too_large"  // over maxRaftMessage
	// refusedSnapshotTooLarge: an InstallSnapshot whose stream is over
	// cluster.ControlConfig.MaxInstallSnapshot.
	refusedSnapshotTooLarge = "snapshot_too_large"
)

// refusalReason names err's metric label.
func refusalReason(err error) string {
	var r *raftRefusal
	if errors.As(err, &r) {
		return r.Reason
	}
	if errors.Is(err, ErrMessageTooLarge) {
		return refusedTooLarge
	}
	return refusedMalformed
}

// RaftView is what the guard reads of this node's Raft server. Every
// function may be nil (no Raft yet): nothing known.
type RaftView struct {
	// Configuration is the latest configuration (committed or not).
	Configuration func() raft.Configuration
	// Term is the current term.
	Term func() uint64
	// Leader is the server this node currently follows ("" if none).
	Leader func() string
	// Self is this node's server id.
	Self string
	// UnknownLeader is told, without blocking, of log at term from id that
	// the voter check refused: a voter this node does not know yet, or an
	// impostor. It starts a vouch round (cluster/raftvouch.go); nil: none.
	UnknownLeader func(id string, term uint64)
}

// raftGuardState is the view decideRaft reads: a snapshot of this node's
// Raft server plus the leader the guard accepted log from.
type raftGuardState struct {
	// Voters of the latest configuration; Configured is false before this
	// node has any configuration.
	Voters     map[string]bool
	Configured bool
	// Term is this node's current term; Leader the server it follows
	// (Self when it leads).
	Term         uint64
	Leader, Self string
	// LeaderID sent the log this node's guard accepted at LeaderTerm.
	LeaderTerm uint64
	LeaderID   string
}

// raftMessage is what decideRaft needs of one decoded message.
type raftMessage struct {
	Type byte
	// ID is the header's server id.
	ID string
	// Term is the request's term (0 for TimeoutNow, which carries none).
	Term uint64
	// Configs are the encoded configurations it carries (InstallSnapshot's,
	// AppendEntries' LogConfiguration entries).
	Configs [][]byte
	// Deprecated is set for a deprecated peer-set entry or a version-0
	// snapshot (raft protocol < 3).
	Deprecated bool
	// Snapshot is the size of the snapshot bytes that follow.
	Snapshot int64
}

// decideRaft decides one message from peer against st. record is set for
// log (AppendEntries, InstallSnapshot) that makes peer the leader of
// msg.Term; the caller records it for the next decision. Pure: the same
// arguments give the same answer.
func decideRaft(peer Peer, msg raftMessage, st raftGuardState) (record bool, err error) {
	if !peer.VoterCapable() {
		return false, Refuse(RefusedRole, "%s may not speak Raft (a node certificate is needed)", peer)
	}
	if msg.ID != peer.ID {
		return false, Refuse(refusedID, "%s sent a raft message as server %q", peer, msg.ID)
	}
	if msg.Deprecated {
		return false, Refuse(refusedConfig, "%s sent a raft protocol < 3 peer set", peer)
	}
	for _, c := range msg.Configs {
		if err := validateRaftConfiguration(c); err != nil {
			return false, Refuse(refusedConfig, "%s sent a configuration that %v", peer, err)
		}
	}
	log := msg.Type == raftwire.AppendEntries || msg.Type == raftwire.InstallSnapshot
	// The leader whose log this node accepted at a term goes on at that
	// term even once its own removal is appended.
	sameLeader := log && msg.Term == st.LeaderTerm && peer.ID == st.LeaderID && st.LeaderID != ""
	if st.Configured && !st.Voters[peer.ID] && !sameLeader {
		return false, Refuse(refusedNotVoter, "%s is not a voter of the latest configuration (raft message type %d, term %d)", peer, msg.Type, msg.Term)
	}
	switch msg.Type {
	case raftwire.TimeoutNow:
		if st.Leader == "" || st.Leader != peer.ID {
			return false, Refuse(refusedNotLeader, "TimeoutNow from %s, which is not this node's leader (%q)", peer, st.Leader)
		}
	case raftwire.AppendEntries, raftwire.InstallSnapshot:
		if msg.Term < st.Term || msg.Term < st.LeaderTerm {
			return false, nil // stale: raft answers with its term and changes nothing
		}
		if msg.Term == st.LeaderTerm && st.LeaderID != "" && peer.ID != st.LeaderID {
			return false, Refuse(refusedNotLeader, "%s sent log at term %d, whose leader is %s", peer, msg.Term, st.LeaderID)
		}
		if msg.Term == st.Term && st.Self != "" && st.Leader == st.Self {
			return false, Refuse(refusedNotLeader, "%s sent log at term %d, which this node leads", peer, msg.Term)
		}
		return true, nil
	}
	return false, nil
}

// validateRaftConfiguration decodes a configuration as hashicorp/raft
// will (DecodeConfiguration, which panics on bad input) and checks what
// raft's own checkConfiguration checks of a new one, plus bounds: every
// server has a known suffrage, a non-empty id and address of at most
// maxConfigField bytes, no id or address twice, at least one voter.
func validateRaftConfiguration(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("does not decode: %v", r)
		}
	}()
	c := raft.DecodeConfiguration(data)
	if len(c.Servers) > maxConfigServers {
		return fmt.Errorf("has %d servers (at most %d)", len(c.Servers), maxConfigServers)
	}
	ids := make(map[raft.ServerID]bool, len(c.Servers))
	addrs := make(map[raft.ServerAddress]bool, len(c.Servers))
	voters := 0
	for _, s := range c.Servers {
		switch s.Suffrage {
		case raft.Voter:
			voters++
		case raft.Nonvoter, raft.Staging:
		default:
			return fmt.Errorf("gives %q the unknown suffrage %d", s.ID, s.Suffrage)
		}
		if s.ID == "" || len(s.ID) > maxConfigField || s.Address == "" || len(s.Address) > maxConfigField {
			return fmt.Errorf("has a server with id %.40q and address %.40q (1..%d bytes each)", s.ID, s.Address, maxConfigField)
		}
		if ids[s.ID] || addrs[s.Address] {
			return fmt.Errorf("names %q or %q twice", s.ID, s.Address)
		}
		ids[s.ID], addrs[s.Address] = true, true
	}
	if voters == 0 {
		return errors.New("has no voter")
	}
	return nil
}

// Guard is a node's guard: its view of Raft, the leader it accepted
// log from, and its refusal count. Safe for concurrent use; one per mux.
type Guard struct {
	view    RaftView
	refused atomic.Uint64
	// off disables every check but the size bounds (tests prove with it
	// that their attacks work on an unguarded node).
	off atomic.Bool
	// maxSnapshot bounds the bytes of one InstallSnapshot stream
	// (cluster.ControlConfig.MaxInstallSnapshot, which cluster defaults to
	// DefaultMaxInstallSnapshot).
	maxSnapshot int64

	mu         sync.Mutex
	leaderTerm uint64
	leaderID   string
}

// NewGuard returns the guard of one node's Raft port: view is what it
// reads of this node's Raft server, maxSnapshot (> 0) bounds the bytes of
// one InstallSnapshot stream.
func NewGuard(view RaftView, maxSnapshot int64) *Guard {
	return &Guard{view: view, maxSnapshot: maxSnapshot}
}

// Refused is how many Raft connections or messages the guard refused.
func (g *Guard) Refused() uint64 { return g.refused.Load() }

// Off reports whether the guard is switched off (SetOff).
func (g *Guard) Off() bool { return g.off.Load() }

// SetOff switches every check but the size bounds off or back on. For
// tests only: they prove with it that their attacks work on an unguarded
// node.
func (g *Guard) SetOff(off bool) { g.off.Store(off) }

// state snapshots the view; called with g.mu held.
func (g *Guard) state() raftGuardState {
	st := raftGuardState{LeaderTerm: g.leaderTerm, LeaderID: g.leaderID, Self: g.view.Self}
	if g.view.Configuration != nil {
		for _, s := range g.view.Configuration().Servers {
			st.Configured = true
			if s.Suffrage == raft.Voter {
				if st.Voters == nil {
					st.Voters = map[string]bool{}
				}
				st.Voters[string(s.ID)] = true
			}
		}
	}
	if g.view.Term != nil {
		st.Term = g.view.Term()
	}
	if g.view.Leader != nil {
		st.Leader = g.view.Leader()
	}
	return st
}

// check decides msg from peer and records an accepted leader.
func (g *Guard) check(peer Peer, msg raftMessage) error {
	if g.off.Load() {
		return nil
	}
	g.mu.Lock()
	st := g.state()
	record, err := decideRaft(peer, msg, st)
	if err == nil && record && msg.Term >= g.leaderTerm {
		g.leaderTerm, g.leaderID = msg.Term, peer.ID
	}
	g.mu.Unlock()
	if err != nil && g.view.UnknownLeader != nil && refusalReason(err) == refusedNotVoter &&
		(msg.Type == raftwire.AppendEntries || msg.Type == raftwire.InstallSnapshot) && msg.Term >= st.Term {
		g.view.UnknownLeader(peer.ID, msg.Term)
	}
	return err
}

// vouch records id as the leader of term on the word of a voter this node
// knows (raftVouch): its log at term then passes the voter check, as a
// leader's whose log this node accepted at that term does. It never
// replaces a leader already recorded at that term or a later one.
func (g *Guard) Vouch(id string, term uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if term < g.leaderTerm || (term == g.leaderTerm && g.leaderID != "" && g.leaderID != id) {
		return false
	}
	g.leaderTerm, g.leaderID = term, id
	return true
}

// count notes one refusal (a counter and the cluster.raft.refused metric).
func (g *Guard) Count(err error) {
	g.refused.Add(1)
	metrics.IncrCounterWithLabels([]string{"cluster", "raft", "refused"}, 1, []metrics.Label{{Name: "reason", Value: refusalReason(err)}})
}

type raftGuardConn struct {
	net.Conn
	pr   *io.PipeReader
	once sync.Once
}

func (c *raftGuardConn) Read(p []byte) (int, error) { return c.pr.Read(p) }

func (c *raftGuardConn) Close() error {
	var err error
	c.once.Do(func() {
		err = c.Conn.Close()
		_ = c.pr.Close()
	})
	return err
}

// checkSnapshotSize refuses an InstallSnapshot that announces more bytes
// than the cap, before one byte of it is read: raft would spool them all
// to disk first (a voter-capable peer could fill the disk).
func (g *Guard) checkSnapshotSize(peer Peer, msg raftMessage) error {
	max := g.maxSnapshot
	if msg.Snapshot > max {
		return Refuse(refusedSnapshotTooLarge, "InstallSnapshot of %d bytes from %s: at most %d", msg.Snapshot, peer, max)
	}
	return nil
}

// GuardRaft returns the connection raft reads from. onRefuse is told why a
// connection was cut.
func GuardRaft(c net.Conn, peer Peer, g *Guard, onRefuse func(error)) net.Conn {
	pr, pw := io.Pipe()
	gc := &raftGuardConn{Conn: c, pr: pr}
	go func() {
		err := runRaftGuard(c, pw, peer, g)
		if errors.Is(err, errRaftRefused) || errors.Is(err, ErrMessageTooLarge) {
			g.Count(err)
			onRefuse(err)
			_ = c.Close()
		}
		_ = pw.CloseWithError(err)
	}()
	return gc
}

// recorder keeps every byte the decoder consumed, so the checked message
// can be passed on verbatim.
type recorder struct {
	r   *bufio.Reader
	buf []byte
	max int
}

func (r *recorder) grow(n int) error {
	if len(r.buf)+n > r.max {
		return fmt.Errorf("%w: raft message over %d bytes", ErrMessageTooLarge, r.max)
	}
	return nil
}

func (r *recorder) Read(p []byte) (int, error) {
	room := r.max - len(r.buf)
	if room <= 0 {
		return 0, r.grow(1)
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

func (r *recorder) ReadByte() (byte, error) {
	if err := r.grow(1); err != nil {
		return 0, err
	}
	b, err := r.r.ReadByte()
	if err == nil {
		r.buf = append(r.buf, b)
	}
	return b, err
}

func (r *recorder) UnreadByte() error {
	if err := r.r.UnreadByte(); err != nil {
		return err
	}
	if len(r.buf) > 0 {
		r.buf = r.buf[:len(r.buf)-1]
	}
	return nil
}

func runRaftGuard(c net.Conn, w io.Writer, peer Peer, g *Guard) error {
	br := bufio.NewReaderSize(c, 64<<10)
	rec := &recorder{r: br, max: maxRaftMessage}
	dec := codec.NewDecoder(rec, &codec.MsgpackHandle{})
	for {
		rec.buf = rec.buf[:0]
		typ, err := rec.ReadByte()
		if err != nil {
			return err
		}
		msg, err := decodeRaftMessage(dec, typ, peer)
		if err != nil {
			return err
		}
		if err := g.checkSnapshotSize(peer, msg); err != nil {
			return err
		}
		if err := g.check(peer, msg); err != nil {
			return err
		}
		if _, err := w.Write(rec.buf); err != nil {
			return err
		}
		if len(rec.buf) > 1<<20 {
			rec.buf = nil // do not pin a large buffer for the connection's life
		}
		if msg.Snapshot > 0 {
			if _, err := io.CopyN(w, br, msg.Snapshot); err != nil {
				return err
			}
		}
	}
}

// decodeRaftMessage decodes one message of type typ (the type byte already
// read) into what decideRaft checks. It never panics.
func decodeRaftMessage(dec *codec.Decoder, typ byte, peer Peer) (msg raftMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = raftMessage{}, Refuse(refusedMalformed, "undecodable message from %s: %v", peer, r)
		}
	}()
	msg.Type = typ
	var hdr raft.RPCHeader
	switch typ {
	case raftwire.AppendEntries:
		var req raft.AppendEntriesRequest
		err = dec.Decode(&req)
		hdr, msg.Term = req.RPCHeader, req.Term
		for _, e := range req.Entries {
			if e == nil {
				continue
			}
			switch e.Type {
			case raft.LogConfiguration:
				msg.Configs = append(msg.Configs, e.Data)
			case raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
				msg.Deprecated = true
			}
		}
	case raftwire.RequestVote:
		var req raft.RequestVoteRequest
		err = dec.Decode(&req)
		hdr, msg.Term = req.RPCHeader, req.Term
	case raftwire.RequestPreVote:
		var req raft.RequestPreVoteRequest
		err = dec.Decode(&req)
		hdr, msg.Term = req.RPCHeader, req.Term
	case raftwire.TimeoutNow:
		var req raft.TimeoutNowRequest
		err = dec.Decode(&req)
		hdr = req.RPCHeader
	case raftwire.InstallSnapshot:
		var req raft.InstallSnapshotRequest
		err = dec.Decode(&req)
		hdr, msg.Term = req.RPCHeader, req.Term
		if err == nil {
			if req.Size < 0 {
				return raftMessage{}, Refuse(refusedMalformed, "InstallSnapshot of %d bytes from %s", req.Size, peer)
			}
			if req.SnapshotVersion != raft.SnapshotVersionMax {
				msg.Deprecated = true // version 0 carries a peer set; raft refuses > max itself
			}
			msg.Configs = append(msg.Configs, req.Configuration)
			msg.Snapshot = req.Size
		}
	default:
		return raftMessage{}, Refuse(refusedMalformed, "unknown raft message type %d from %s", typ, peer)
	}
	if err != nil {
		if errors.Is(err, ErrMessageTooLarge) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
			return raftMessage{}, err
		}
		return raftMessage{}, Refuse(refusedMalformed, "undecodable message from %s: %v", peer, err)
	}
	msg.ID = string(hdr.ID)
	return msg, nil
}
