package tier2

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/node"
	"github.com/tenurehq/tenure/simulation/history"
)

// Violation is one broken guarantee.
type Violation struct {
	// Check names the guarantee: S1, S2, S3, S4, L1, or app (App.Check).
	Check string
	// At is the virtual time since the run started.
	At  time.Duration
	Msg string
}

func (v Violation) String() string { return fmt.Sprintf("%s at %v: %s", v.Check, v.At, v.Msg) }

// Term is one acting interval: a node process ran the application's
// worker on a shard from Begin to End (virtual time since the start).
// BeginSeq and EndSeq order every recorded begin and end across all nodes
// as they happened; S4 is checked on them.
type Term struct {
	Node        string
	Incarnation uint64
	Token       node.Token
	Begin, End  time.Duration
	// Open reports that the worker was still running when the run ended.
	Open bool
	// Fenced reports that the shard was under fenced takeover (in the
	// committed log) when the term began: S4 is waived for it.
	Fenced           bool
	BeginSeq, EndSeq uint64
}

// The recorder and checkers. Tier 1's checkers (simulation/checker.go) are
// unexported and read the simulator's own model of Raft (a single
// reference log), so tier 2 checks the same guarantees from what it can
// observe of real components: every replica's apply stream
// (node.MemNetwork.OnApply), the workers' lifetimes and the clients'
// acknowledgements.

type replicaKey struct {
	node string
	inc  uint64
}

type entryKey struct {
	index uint64
	k     int // position within a batch entry
}

// replica is what one node process applied.
type replica struct {
	last uint64
	k    int
	// apps[index] lists digests of the App commands applied at index.
	apps map[uint64][]uint64
}

type ack struct {
	node   string
	index  uint64
	typ    string
	digest uint64
	at     time.Duration
}

type recorder struct {
	start time.Time

	mu         sync.Mutex
	seq        uint64
	terms      []*Term
	replicas   map[replicaKey]*replica
	log        map[entryKey]uint64 // digest of the entry each replica must agree on
	hist       *history.Checker    // the ledger contract, fed in log order
	completed  uint64              // jobs completed (accepted JobComplete entries)
	acks       []ack
	ackCutoff  int // acks judged by the final checks: acks[:ackCutoff]
	applies    uint64
	version    uint32 // the highest cluster version a ClusterConfig committed
	violations []Violation
	stale      staleStats
	// fencedOverlaps are the overlaps S4 waives (Result.FencedOverlaps).
	fencedOverlaps []string
	// trace digests every recorded event in the order it happened, with
	// its virtual time: equal traces mean equal histories (tier 3 compares
	// them across runs of one seed).
	trace uint64
}

// note folds one event into the trace. Call with r.mu held.
func (r *recorder) note(kind string, parts ...any) {
	r.trace = digest(binary.BigEndian.AppendUint64(nil, r.trace), []byte(kind), fmt.Append(nil, parts...),
		binary.BigEndian.AppendUint64(nil, uint64(r.now())))
}

type staleStats struct {
	probes, rejected uint64
}

func newRecorder(start time.Time) *recorder {
	r := &recorder{start: start, replicas: map[replicaKey]*replica{}, log: map[entryKey]uint64{}}
	f, err := ledger.NewFSM(ledger.DefaultConfig()) // the nodes' settings
	if err != nil {
		panic(err) // the default config is valid
	}
	r.hist = history.New(f.State().Settings(), func(rule, msg string) { r.violate(rule, "%s", msg) })
	return r
}

func (r *recorder) now() time.Duration { return time.Since(r.start) }

// violate records a violation; r.mu held.
func (r *recorder) violate(check, format string, args ...any) {
	r.violations = append(r.violations, Violation{Check: check, At: r.now(), Msg: fmt.Sprintf(format, args...)})
}

// Violate records a violation from outside the recorder.
func (r *recorder) Violate(check, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violate(check, format, args...)
}

func digest(parts ...[]byte) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write(p)
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

func appDigest(typ string, payload []byte) uint64 { return digest([]byte(typ), payload) }

// apply is node.MemNetwork.OnApply: one command applied by one replica.
func (r *recorder) apply(id string, inc uint64, index uint64, c ledger.Command, res ledger.Result) {
	enc, err := ledger.Encode(c)
	if err != nil {
		enc = []byte(fmt.Sprintf("unencodable %T", c))
	}
	verdict := []byte{0}
	if res.Err != nil {
		verdict[0] = 1
	}
	d := digest(enc, verdict)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("apply", id, inc, index, d)
	r.applies++
	rk := replicaKey{id, inc}
	rp := r.replicas[rk]
	if rp == nil {
		rp = &replica{apps: map[uint64][]uint64{}}
		r.replicas[rk] = rp
	}
	switch {
	case index == rp.last:
		rp.k++
	case index < rp.last:
		r.violate("S3", "%s#%d applied index %d after %d", id, inc, index, rp.last)
		rp.last, rp.k = index, 0
	default:
		rp.last, rp.k = index, 0
	}
	ek := entryKey{index, rp.k}
	// S3 (and determinism): a committed entry is the same command with the
	// same verdict on every replica.
	if old, ok := r.log[ek]; ok && old != d {
		r.violate("S3", "%s#%d applied a different entry or verdict at index %d.%d (%s)", id, inc, index, rp.k, describe(c, res))
	} else if !ok {
		r.log[ek] = d
		// The first replica to apply an entry feeds the history checker:
		// every replica applies in log order, so first sightings are in
		// log order too. The checker holds the whole ledger contract (S1,
		// S2, jobs, liveness) — the one the tier-1 sweep uses.
		if !res.Replayed {
			r.hist.Apply(index, "", ledger.Unwrap(c), res)
			if _, ok := ledger.Unwrap(c).(ledger.JobComplete); ok && res.Err == nil {
				r.completed++
			}
		}
	}
	if cc, ok := ledger.Unwrap(c).(ledger.ClusterConfig); ok && res.Err == nil {
		r.version = max(r.version, cc.Version)
	}
	if a, ok := ledger.Unwrap(c).(ledger.App); ok && res.Err == nil && !res.Replayed {
		rp.apps[index] = append(rp.apps[index], appDigest(a.Type, a.Payload))
	}
}

func describe(c ledger.Command, res ledger.Result) string {
	if res.Err != nil {
		return fmt.Sprintf("%T (rejected: %v)", c, res.Err)
	}
	return fmt.Sprintf("%T", c)
}

// begin records that a node started acting on tok's shard.
func (r *recorder) begin(id string, inc uint64, tok node.Token) *Term {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	t := &Term{Node: id, Incarnation: inc, Token: tok, Begin: r.now(), BeginSeq: r.seq, Open: true, Fenced: r.hist.Fenced(tok.Shard)}
	r.terms = append(r.terms, t)
	r.note("begin", id, inc, tok.Shard, tok.Epoch)
	return t
}

// end records that the worker of t returned.
func (r *recorder) end(t *Term) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	t.End, t.EndSeq, t.Open = r.now(), r.seq, false
	r.note("end", t.Node, t.Incarnation, t.Token.Shard, t.Token.Epoch)
}

// acked records a command the cluster acknowledged as committed.
func (r *recorder) acked(id string, a node.Applied, typ string, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, ack{node: id, index: a.Index, typ: typ, digest: appDigest(typ, payload), at: r.now()})
	r.note("ack", id, a.Index, typ)
}

// checkS4 reports terms of one shard, run by different node processes,
// that overlap: one began before the other ended, in the order the events
// happened. Within a bubble every node reads the same clock, so clock
// drift is not modelled; tier 1 covers it. A term that began while its
// shard was under fenced takeover may overlap its predecessor (S4 waived
// for the shard; the history checker still holds every write of both to
// the shard's current epoch, S2): it is counted, not reported.
func (r *recorder) checkS4() {
	r.mu.Lock()
	defer r.mu.Unlock()
	by := map[uint32][]*Term{}
	for _, t := range r.terms {
		by[t.Token.Shard] = append(by[t.Token.Shard], t)
	}
	shards := make([]uint32, 0, len(by))
	for s := range by {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	const inf = ^uint64(0)
	for _, s := range shards {
		ts := by[s]
		slices.SortFunc(ts, func(a, b *Term) int { return cmp.Compare(a.BeginSeq, b.BeginSeq) })
		for i, a := range ts {
			aEnd := a.EndSeq
			if a.Open {
				aEnd = inf
			}
			for _, b := range ts[i+1:] {
				if b.BeginSeq > aEnd {
					break
				}
				if a.Node == b.Node && a.Incarnation == b.Incarnation {
					continue
				}
				end := "still running"
				if !a.Open {
					end = fmt.Sprintf("until %v", a.End)
				}
				if b.Fenced {
					r.fencedOverlaps = append(r.fencedOverlaps, fmt.Sprintf("shard %d: %s#%d (epoch %d, from %v, %s) -> %s#%d (epoch %d) at %v",
						s, a.Node, a.Incarnation, a.Token.Epoch, a.Begin, end, b.Node, b.Incarnation, b.Token.Epoch, b.Begin))
					continue
				}
				r.violate("S4", "shard %d: %s#%d acted (epoch %d, from %v, %s) when %s#%d began acting (epoch %d) at %v",
					s, a.Node, a.Incarnation, a.Token.Epoch, a.Begin, end, b.Node, b.Incarnation, b.Token.Epoch, b.Begin)
			}
		}
	}
}

// checkAcks reports acknowledged App commands missing from a live
// replica: the replica has not reached the index, or applied something
// else there (S3).
func (r *recorder) checkAcks(live map[string]uint64, applied map[string]uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, a := range r.acks[:r.ackCutoff] {
		seen := false
		for _, rp := range r.replicas {
			if slices.Contains(rp.apps[a.index], a.digest) {
				seen = true
				break
			}
		}
		if !seen {
			r.violate("S3", "command %s acknowledged to %s at index %d (at %v) was applied by no replica at that index", a.typ, a.node, a.index, a.at)
		}
		for _, id := range ids {
			if applied[id] < a.index {
				r.violate("S3", "live replica %s applied only up to %d, missing acknowledged index %d", id, applied[id], a.index)
				continue
			}
			rp := r.replicas[replicaKey{id, live[id]}]
			if rp == nil {
				continue
			}
			if got, ok := rp.apps[a.index]; ok && !slices.Contains(got, a.digest) {
				r.violate("S3", "live replica %s has a different command at acknowledged index %d", id, a.index)
			}
		}
	}
}
