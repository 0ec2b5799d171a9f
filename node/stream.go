package node

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

// StreamStatus is this node's part in the committed-state stream (cluster
// version 5, docs/control-group.md): a member (Config.Voter "never")
// follows it instead of Raft; voters serve it.
type StreamStatus struct {
	// Following: this node is a member on the stream (cluster version 5
	// active in its replica, or entries already received from it).
	Following bool
	// Server is the address of the voter it follows (or followed last).
	Server string
	// LagEntries is how many log indexes its replica was behind the
	// serving voter's at the voter's last reply.
	LagEntries uint64
	// CaughtUp is when its replica last had everything the voter had
	// (zero: not yet since start); Behind is the time since then while it
	// lags or hears from no voter, 0 when caught up.
	CaughtUp time.Time
	Behind   time.Duration
	// Reconnects, Snapshots, Entries and BytesReceived count the member's
	// stream since start.
	Reconnects, Snapshots, Entries, BytesReceived uint64
	// Subscribers, BytesSent and Refused are a voter's side: Subscribe
	// calls it holds now, entry and snapshot bytes it sent, calls it
	// refused (cap reached, not serving).
	Subscribers int64
	BytesSent   uint64
	Refused     uint64
}

// streamer is implemented by control planes with a stream
// (clusterControl).
type streamer interface {
	StreamStatus() cluster.StreamStatus
}

// streamStatus reads the control plane's stream status; following only
// once the replica has cluster version 5 or the stream delivered.
func streamStatus(ctl controlPlane, st *ledger.State) StreamStatus {
	s, ok := ctl.(streamer)
	if !ok {
		return StreamStatus{}
	}
	cs := s.StreamStatus()
	return StreamStatus{
		Following:     cs.Following && (st.VersionActive(ledger.VersionStreamMembers) || cs.Entries > 0 || cs.Snapshots > 0),
		Server:        cs.Server,
		LagEntries:    cs.LagEntries,
		CaughtUp:      cs.CaughtUp,
		Behind:        cs.Behind,
		Reconnects:    cs.Reconnects,
		Snapshots:     cs.Snapshots,
		Entries:       cs.Entries,
		BytesReceived: cs.BytesReceived,
		Subscribers:   cs.Subscribers,
		BytesSent:     cs.BytesSent,
		Refused:       cs.Refused,
	}
}

// streamProblem is why a member on the stream is not ready ("" when it
// is): it never caught up since start, or it lags more than bound.
func streamProblem(s StreamStatus, bound time.Duration) string {
	switch {
	case !s.Following:
		return ""
	case s.CaughtUp.IsZero():
		return "stream: replica has not caught up with a voter since start"
	case s.Behind > bound:
		return fmt.Sprintf("stream: replica %s behind (%d entries; server %s)", s.Behind.Round(time.Millisecond), s.LagEntries, s.Server)
	}
	return ""
}

// streamLagBound is how far behind a member on the stream may be and still
// be ready: two leases (it could not keep its lease that far behind), at
// least 5 s.
func (n *Node) streamLagBound() time.Duration { return max(2*n.timing.Lease, 5*time.Second) }
