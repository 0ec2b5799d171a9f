package ledger

// The jobs API contract of cluster version 5 (docs/jobs.md, "What the
// answers promise"):
//
//   - The pending-jobs cap is decided here, on the committed state: a
//     JobEnqueue carries the proposer's cap (JobEnqueue.MaxPending) and the
//     FSM refuses a new job with ErrQueueFull while the shard holds that
//     many pending jobs. Enqueues through several nodes are serialized by
//     the log, so the cap is exact.
//   - A request id names one request body: the session table remembers a
//     digest of the wrapped command's body (RequestDigest) and refuses the
//     id with another body — or another command or shard — with
//     ErrRequestIDReused instead of answering the first request's result.

import (
	"errors"
)

// VersionJobsAPI is the cluster version from which proposers send the
// pending-jobs cap in JobEnqueue (encoding version 7) and the FSM refuses a
// request id reused with another body (the session table keeps body
// digests: snapshot version 7). Before it the cap is checked by the
// proposer on its replica (advisory) and a reused id with the same command
// kind and shard answers the first request's result.
const VersionJobsAPI uint32 = 5

const (
	// encodingJobsAPI is the encoding version of JobEnqueue.MaxPending.
	encodingJobsAPI byte = 7
	// snapshotJobsAPI is the snapshot version with session body digests.
	snapshotJobsAPI byte = 7
)

var (
	// ErrQueueFull: a new job on a shard that already holds
	// JobEnqueue.MaxPending pending jobs. Nothing changed.
	ErrQueueFull = errors.New("ledger: shard's pending-jobs cap reached")
	// ErrRequestIDReused: a request id that the session table holds for a
	// request with another body (another command, shard or content).
	// Nothing changed.
	ErrRequestIDReused = errors.New("ledger: request id reused with another request")
)

// Digest is what a session entry remembers of its request's body.
type Digest [16]byte

// queueFull reports whether shard already holds max pending jobs (max 0:
// no cap).
func (s *State) queueFull(shard uint32, max uint32) bool {
	return max > 0 && s.CountJobs(shard, JobPending, int(max)) >= int(max)
}
