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
	"crypto/sha256"
	"encoding/binary"
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

// RequestDigest is the digest of what a request id stands for: the wrapped
// command's kind and its body, without the proposer's clock (Now) and
// without JobEnqueue.MaxPending (the proposing node's setting, not the
// client's request). Two tries of one request have the same digest
// whichever node proposes them.
func RequestDigest(c Command) Digest {
	h := sha256.New()
	var b []byte
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	u(uint64(KindOf(c)))
	switch c := c.(type) {
	case JobEnqueue:
		u(uint64(c.Shard))
		str(c.Key)
		str(c.Type)
		str(string(c.Payload))
		u(uint64(c.MaxAttempts))
	case App:
		u(uint64(c.Shard))
		u(c.Epoch)
		str(c.Type)
		str(string(c.Payload))
	default:
		// Other commands are proposed by nodes, not by clients: a copy of
		// the command without its clock is its body.
		z := zeroNow(c)
		enc, err := Encode(z)
		if err == nil {
			str(string(enc))
		}
	}
	h.Write(b)
	var d Digest
	copy(d[:], h.Sum(nil))
	return d
}

// zeroNow returns c with its proposer clock zeroed, for the commands whose
// Now a retry refreshes.
func zeroNow(c Command) Command {
	switch c := c.(type) {
	case JobStart:
		c.Now = 0
		return c
	case JobComplete:
		c.Now = 0
		return c
	case JobFail:
		c.Now = 0
		return c
	case Release:
		c.Now = 0
		return c
	case SetDraining:
		c.Now = 0
		return c
	}
	return c
}

// queueFull reports whether shard already holds max pending jobs (max 0:
// no cap).
func (s *State) queueFull(shard uint32, max uint32) bool {
	return max > 0 && s.CountJobs(shard, JobPending, int(max)) >= int(max)
}
