package simulation

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// appType is the simulated application state machine's type.
const appType = "sim.counter"

// counterApp is the simulated application state machine: a counter per
// shard, incremented by every accepted App command. Every replica must end
// with the same counts.
type counterApp struct{ counts map[uint32]uint64 }

func newCounterApp() *counterApp { return &counterApp{counts: map[uint32]uint64{}} }

// Apply implements ledger.StateMachine.
func (a *counterApp) Apply(shard uint32, epoch, index uint64, payload []byte) ([]byte, error) {
	a.counts[shard]++
	return binary.AppendUvarint(nil, a.counts[shard]), nil
}

// Snapshot implements ledger.StateMachine.
func (a *counterApp) Snapshot() ([]byte, error) {
	keys := make([]uint32, 0, len(a.counts))
	for k := range a.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(k))
		b = binary.AppendUvarint(b, a.counts[k])
	}
	return b, nil
}

// Restore implements ledger.StateMachine.
func (a *counterApp) Restore(b []byte) error {
	a.counts = map[uint32]uint64{}
	for len(b) > 0 {
		k, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: bad counter snapshot", ErrInvalidConfig)
		}
		b = b[n:]
		v, m := binary.Uvarint(b)
		if m <= 0 {
			return fmt.Errorf("%w: bad counter snapshot", ErrInvalidConfig)
		}
		b = b[m:]
		a.counts[uint32(k)] = v
	}
	return nil
}

// work is the workload of one node: for each shard it acts on (and is not
// draining), it enqueues jobs, starts pending or timed-out ones, completes
// its own after a short work time, and proposes application commands, all
// fenced by the epoch it acts under. For Revoking shards it decides when
// the workers finish draining (sometimes never: a stuck worker), and
// reports it to the agent.
func (s *Sim) work(n *node) {
	s.onNode(n, n.trueAfter(s.jitter(100*time.Millisecond, 300*time.Millisecond)), evWork, func() { s.work(n) })
	local := n.localTime(s.now)
	st := s.replica(n)
	wall := s.wall(n)
	acting := n.agent.ActingShards(local)
	// New work (a job and an application command) goes to one random shard
	// per tick; every acting shard's jobs are advanced.
	pick := -1
	if len(acting) > 0 {
		pick = s.rng.IntN(len(acting))
	}
	for i, sh := range acting {
		rec, _ := st.Shard(sh)
		if rec.State == ledger.ShardRevoking {
			at, ok := n.drainAt[sh]
			if !ok {
				at = s.now + int64(s.jitter(0, 2*s.cfg.Ownership.DrainTimeout))
				if s.chance(0.2) {
					at = -1 // a stuck worker that ignores cancellation
				}
				n.drainAt[sh] = at
			}
			if at >= 0 && s.now >= at {
				s.step(n, ownership.ShardDrained{Shard: sh, Epoch: rec.Epoch})
			}
			continue
		}
		delete(n.drainAt, sh)
		for _, w := range s.cfg.Workers {
			for _, c := range w.Tick(n.id, sh, rec.Epoch, st, wall) {
				s.raft.propose(n, c, nil)
			}
		}
		if !s.cfg.Workload {
			continue
		}
		if i == pick && s.chance(0.5) {
			n.jobSeq++
			// Few attempts, so failures reach the dead letter.
			s.proposeRetried(n, st, ledger.JobEnqueue{Shard: sh, Key: fmt.Sprintf("%s-%d-%d", n.id, n.inc, n.jobSeq), Type: "sim",
				MaxAttempts: uint32(1 + s.rng.IntN(3)), Now: wall})
		}
		if i == pick && s.chance(0.5) {
			s.proposeRetried(n, st, ledger.App{Shard: sh, Epoch: rec.Epoch, Type: appType, Payload: []byte{1}, Now: wall})
		}
		for _, j := range st.Jobs(sh, ledger.JobPending) {
			s.jobOp(n, fmt.Sprintf("start %d/%d", j.ID, j.Attempt), ledger.JobStart{Shard: sh, Epoch: rec.Epoch, Owner: n.id,
				Job: j.ID, Attempt: j.Attempt, Timeout: int64(2 * time.Second), Now: wall})
		}
		for _, j := range st.Jobs(sh, ledger.JobStarted) {
			switch {
			case j.Owner == n.id && j.Epoch == rec.Epoch && wall-j.StartedAt >= int64(100*time.Millisecond):
				var c ledger.Command = ledger.JobComplete{Shard: sh, Epoch: rec.Epoch, Job: j.ID, Attempt: j.Attempt, Now: wall}
				if s.chance(0.3) { // the handler failed: retried after a backoff, or dead
					c = ledger.JobFail{Shard: sh, Epoch: rec.Epoch, Job: j.ID, Attempt: j.Attempt, Error: "sim",
						Backoff: int64(s.jitter(0, 300*time.Millisecond)), Now: wall}
				}
				s.jobOp(n, fmt.Sprintf("complete %d/%d", j.ID, j.Attempt), c)
			case j.Epoch != rec.Epoch && j.Timeout > 0 && wall-j.StartedAt > j.Timeout:
				s.jobOp(n, fmt.Sprintf("start %d/%d", j.ID, j.Attempt), ledger.JobStart{Shard: sh, Epoch: rec.Epoch, Owner: n.id,
					Job: j.ID, Attempt: j.Attempt, Timeout: int64(2 * time.Second), Now: wall})
			}
		}
	}
}

// jobOp proposes a job transition unless the same one is in flight.
func (s *Sim) jobOp(n *node, key string, c ledger.Command) {
	if t, ok := n.inflight[key]; ok && s.now-t < int64(300*time.Millisecond) {
		return
	}
	n.inflight[key] = s.now
	s.raft.propose(n, c, nil)
}

// maxRequestIDs is how many recent request ids the simulator keeps for the
// probes that reuse one (probe.go).
const maxRequestIDs = 64

// proposeRetried proposes an enqueue or application command as node does:
// once the cluster runs ledger.VersionRequestIDs, wrapped in a Session
// with a request id of its own, and retried with that same id, up to
// three times, when the outcome is unknown (the ledger answers a retry
// whose first try applied with the first result). Before that version it
// is proposed once, unwrapped.
func (s *Sim) proposeRetried(n *node, st *ledger.State, c ledger.Command) {
	if !st.VersionActive(ledger.VersionRequestIDs) {
		s.raft.propose(n, c, nil)
		return
	}
	s.ridSeq++
	var id ledger.RequestID
	binary.BigEndian.PutUint64(id[:8], s.cfg.Seed|1<<63)
	binary.BigEndian.PutUint64(id[8:], s.ridSeq)
	s.proposeSession(n, ledger.Session{ID: id, Command: c}, 3)
}

func (s *Sim) proposeSession(n *node, c ledger.Session, tries int) {
	s.raft.propose(n, c, func(_ ledger.Result, _ uint64, err error) {
		if errors.Is(err, ownership.ErrLeadershipLost) && tries > 1 {
			s.onNode(n, 50*time.Millisecond, evWork, func() { s.proposeSession(n, c, tries-1) })
		}
	})
}

// usedRequestID records id, whose Session the log applied (the ledger
// remembers it), for the probes that reuse one.
func (s *Sim) usedRequestID(id ledger.RequestID) {
	if len(s.requestIDs) < maxRequestIDs {
		s.requestIDs = append(s.requestIDs, id)
		return
	}
	s.requestIDs[s.ridSeq%maxRequestIDs] = id
}
