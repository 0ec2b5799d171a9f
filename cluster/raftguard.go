package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// The Raft guard sits between an authenticated connection and
// hashicorp/raft's NetworkTransport. It decodes each message the peer sends
// (the transport's framing: one type byte, a msgpack request, and for
// InstallSnapshot the snapshot's bytes), checks it, and only then passes
// the very same bytes on to the transport. Writes (raft's responses) go
// straight to the connection. A message that fails a check closes the
// connection; Raft sees a dropped connection, as after a network fault.
//
// The checks:
//   - the header's server id is the id the peer proved (its certificate):
//     no member speaks for another, and an operator certificate speaks for
//     no server at all;
//   - TimeoutNow (start an election now) comes only from the leader this
//     node follows: hashicorp/raft acts on it from anyone;
//   - an InstallSnapshot's configuration decodes: hashicorp/raft's decoder
//     panics on a malformed one, killing the process;
//   - a message is at most maxRaftMessage bytes (the decoder grows slices
//     as bytes arrive, so a large declared length costs nothing up front).
//
// What it cannot check: a member with a valid certificate can still send
// Raft messages as itself (ask for votes, claim a higher term). Raft
// tolerates crashes, not lies; docs/security.md says what that means.

// The transport's message types (hashicorp/raft net_transport.go; stable
// since the wire format is shared across raft versions).
const (
	raftAppendEntries  byte = 0
	raftRequestVote    byte = 1
	raftInstallSnap    byte = 2
	raftTimeoutNow     byte = 3
	raftRequestPreVote byte = 4

	// maxRaftMessage bounds one Raft message without its snapshot bytes:
	// at most MaxAppendEntries (64) entries of at most
	// ledger.MaxCommandSize (16 MiB) each would not fit, but the batcher
	// keeps entries at ≤ 1 MiB, so 64 MiB is generous.
	maxRaftMessage = 64 << 20
)

// errRaftRefused marks a message the guard refused.
var errRaftRefused = errors.New("cluster: raft message refused")

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

// guardRaft returns the connection raft reads from; leader names the server
// this node currently follows ("" if none). onRefuse is told why a
// connection was cut.
func guardRaft(c net.Conn, peer Peer, leader func() string, onRefuse func(error)) net.Conn {
	pr, pw := io.Pipe()
	gc := &raftGuardConn{Conn: c, pr: pr}
	go func() {
		err := runRaftGuard(c, pw, peer, leader)
		if errors.Is(err, errRaftRefused) || errors.Is(err, ErrMessageTooLarge) {
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

func runRaftGuard(c net.Conn, w io.Writer, peer Peer, leader func() string) error {
	br := bufio.NewReaderSize(c, 64<<10)
	rec := &recorder{r: br, max: maxRaftMessage}
	dec := codec.NewDecoder(rec, &codec.MsgpackHandle{})
	for {
		rec.buf = rec.buf[:0]
		typ, err := rec.ReadByte()
		if err != nil {
			return err
		}
		snapshot, err := checkRaftMessage(dec, typ, peer, leader)
		if err != nil {
			return err
		}
		if _, err := w.Write(rec.buf); err != nil {
			return err
		}
		if len(rec.buf) > 1<<20 {
			rec.buf = nil // do not pin a large buffer for the connection's life
		}
		if snapshot > 0 {
			if _, err := io.CopyN(w, br, snapshot); err != nil {
				return err
			}
		}
	}
}

// checkRaftMessage decodes one message and returns the size of the
// snapshot that follows it (InstallSnapshot only).
func checkRaftMessage(dec *codec.Decoder, typ byte, peer Peer, leader func() string) (snapshot int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: undecodable message from %s: %v", errRaftRefused, peer, r)
		}
	}()
	var hdr raft.RPCHeader
	switch typ {
	case raftAppendEntries:
		var req raft.AppendEntriesRequest
		err = dec.Decode(&req)
		hdr = req.RPCHeader
	case raftRequestVote:
		var req raft.RequestVoteRequest
		err = dec.Decode(&req)
		hdr = req.RPCHeader
	case raftRequestPreVote:
		var req raft.RequestPreVoteRequest
		err = dec.Decode(&req)
		hdr = req.RPCHeader
	case raftTimeoutNow:
		var req raft.TimeoutNowRequest
		err = dec.Decode(&req)
		hdr = req.RPCHeader
		if err == nil && (peer.ID == "" || leader() != peer.ID) {
			return 0, fmt.Errorf("%w: TimeoutNow from %s, which is not this node's leader", errRaftRefused, peer)
		}
	case raftInstallSnap:
		var req raft.InstallSnapshotRequest
		err = dec.Decode(&req)
		hdr = req.RPCHeader
		if err == nil {
			if req.Size < 0 {
				return 0, fmt.Errorf("%w: InstallSnapshot of %d bytes from %s", errRaftRefused, req.Size, peer)
			}
			if req.SnapshotVersion > 0 {
				// raft panics on a configuration it cannot decode.
				_ = raft.DecodeConfiguration(req.Configuration)
			}
			snapshot = req.Size
		}
	default:
		return 0, fmt.Errorf("%w: unknown raft message type %d from %s", errRaftRefused, typ, peer)
	}
	if err != nil {
		if errors.Is(err, ErrMessageTooLarge) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
			return 0, err
		}
		return 0, fmt.Errorf("%w: undecodable message from %s: %v", errRaftRefused, peer, err)
	}
	if peer.Operator || string(hdr.ID) != peer.ID {
		return 0, fmt.Errorf("%w: %s sent a raft message as server %q", errRaftRefused, peer, hdr.ID)
	}
	return snapshot, nil
}
