package raftnet

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/rpc"
)

// This file is the wrapper every control group puts around its Raft
// transport so that a voter that comes back after an outage is replicated to
// again within tens of milliseconds.
//
// hashicorp/raft's leader replicates to each follower from one goroutine
// (replication.go, replicateTo). Each failed AppendEntries adds one to a
// failure count, and the next attempt first sleeps backoff(10 ms, failures,
// 12): 10 ms doubled per failure, up to 10.24 s. A peer that is down for 30
// s reaches the cap, and when it returns the leader may still sleep up to
// 10 s before it sends the entries the peer missed (its heartbeats, from
// another goroutine with a backoff capped at HeartbeatTimeout/2, carry no
// entries and no commit index). The count is reset only by a successful
// AppendEntries.
//
// So log replication (not heartbeats) to an unreachable peer waits here for
// the peer instead of failing at once: after a send that could not reach
// the peer (a *rpc.DialError: the connection could not be made) the same request
// is sent again every WaitProbe until it gets an answer, which reaches raft
// as the one outcome of its single call. Any other error (the peer was
// reached, or may have been) goes to raft at once, as before: a peer that
// answers with errors is left to raft's backoff, not probed 40 times a
// second. Raft's failure count then grows by
// at most one per WaitMax of outage, and replication resumes within
// WaitProbe (plus a round trip) of the peer answering again.
//
// What the wait never does:
//   - answer for the peer: raft sees only a real response or the error, so
//     a blocked call is no contact (LastContact, the leader lease check and
//     VerifyLeader, which ride on heartbeats, are unchanged);
//   - outlive its purpose: it ends, returning the last error, when the
//     transport closes (ControlGroup.Close closes it before waiting for
//     raft's goroutines), when this node is no longer leader in the
//     request's term, when the peer left the configuration or changed
//     address, or after WaitMax.
//
// Re-sending a request is safe: AppendEntries is idempotent for the same
// term, previous entry and entries, and a late duplicate is one raft
// already tolerates from a slow network.

const (
	// WaitProbe is how often a waiting replication call re-sends its
	// request to the unreachable peer.
	WaitProbe = 25 * time.Millisecond
	// WaitMax bounds one wait. Past it raft sees the error and counts a
	// failure: an outage of k·WaitMax costs at most backoff(10 ms, k+1)
	// (≤ 160 ms for outages under an hour) after the peer returns.
	WaitMax = 10 * time.Minute
)

// ReplicationWanted reports whether replication to the peer at id/addr in
// term is still wanted: this node leads in that term and the peer is in the
// latest configuration at that address.
type ReplicationWanted func(id raft.ServerID, addr raft.ServerAddress, term uint64) bool

// WaitingTransport is a raft.Transport whose AppendEntries waits for an
// unreachable peer (see the comment at the top of this file). Every other
// call passes through.
type WaitingTransport struct {
	raft.Transport
	log    *slog.Logger
	probe  time.Duration
	max    time.Duration
	wanted atomic.Pointer[ReplicationWanted]

	closeOnce sync.Once
	closed    chan struct{}

	waiting  atomic.Int64  // calls waiting right now
	failures atomic.Uint64 // replication errors returned to raft: each is one more failure in its backoff count
}

// waitingPreVoteTransport is WaitingTransport for an inner transport that
// supports pre-vote: raft enables pre-vote by checking the transport's type.
type waitingPreVoteTransport struct{ *WaitingTransport }

func (t waitingPreVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

var (
	_ raft.WithClose   = (*WaitingTransport)(nil)
	_ raft.WithPreVote = waitingPreVoteTransport{}
)

// NewWaitingTransport wraps inner. Until SetWanted is called, a wait ends
// only on close or after max.
func NewWaitingTransport(inner raft.Transport, log *slog.Logger, probe, max time.Duration) *WaitingTransport {
	return &WaitingTransport{Transport: inner, log: log, probe: probe, max: max, closed: make(chan struct{})}
}

// RaftTransport is t as raft should see it (with pre-vote when inner has it).
func (t *WaitingTransport) RaftTransport() raft.Transport {
	if _, ok := t.Transport.(raft.WithPreVote); ok {
		return waitingPreVoteTransport{t}
	}
	return t
}

// SetWanted installs the check that ends a wait once replication to its
// peer is no longer wanted.
func (t *WaitingTransport) SetWanted(f ReplicationWanted) { t.wanted.Store(&f) }

// Waiting is how many replication calls wait right now.
func (t *WaitingTransport) Waiting() int64 { return t.waiting.Load() }

// Failures is how many replication errors t returned to raft: each is one
// more failure in raft's backoff count.
func (t *WaitingTransport) Failures() uint64 { return t.failures.Load() }

// Close ends every wait, then closes the inner transport if it can be.
func (t *WaitingTransport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.closed)
		if c, ok := t.Transport.(raft.WithClose); ok {
			err = c.Close()
		}
	})
	return err
}

// isHeartbeat matches raft's heartbeat request (replication.go, heartbeat),
// the same test raft's NetworkTransport uses for its fast path.
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return a.Term != 0 && a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

// AppendEntries implements raft.Transport: a heartbeat fails at once as
// before; log replication waits for an unreachable peer.
func (t *WaitingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.Transport.AppendEntries(id, target, args, resp)
	if err == nil || isHeartbeat(args) {
		return err
	}
	if !rpc.IsDialError(err) {
		t.failures.Add(1)
		return err
	}
	if err = t.wait(id, target, args, resp, err); err != nil {
		t.failures.Add(1)
	}
	return err
}

func (t *WaitingTransport) wait(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) error {
	t.waiting.Add(1)
	defer t.waiting.Add(-1)
	start := time.Now()
	t.log.Info("cluster: raft peer unreachable; replication waits for it", "peer", id, "addr", target, "error", err)
	timer := time.NewTimer(t.probe)
	defer timer.Stop()
	for tries := 1; ; tries++ {
		select {
		case <-t.closed:
			return err
		case <-timer.C:
		}
		if time.Since(start) >= t.max {
			t.log.Warn("cluster: raft peer still unreachable; raft backs off", "peer", id, "waited", time.Since(start).Round(time.Millisecond), "error", err)
			return err
		}
		if w := t.wanted.Load(); w != nil && !(*w)(id, target, args.Term) {
			return err
		}
		*resp = raft.AppendEntriesResponse{}
		err = t.Transport.AppendEntries(id, target, args, resp)
		if err == nil || !rpc.IsDialError(err) {
			t.log.Info("cluster: raft peer reachable again", "peer", id, "waited", time.Since(start).Round(time.Millisecond), "tries", tries, "error", err)
			return err
		}
		timer.Reset(t.probe)
	}
}
