package bench

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/s4check"
)

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// foRecorder is the benchmark's witness: it stores every tick per shard.
type foRecorder struct {
	mu    sync.Mutex
	ticks map[uint32][]s4check.Tick
	total int
}

func newFoRecorder() *foRecorder { return &foRecorder{ticks: map[uint32][]s4check.Tick{}} }

func (r *foRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST ticks", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, s4check.MaxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	batch, err := s4check.DecodeBatch(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(batch)
	w.WriteHeader(http.StatusNoContent)
}

func (r *foRecorder) add(batch []s4check.Tick) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range batch {
		r.ticks[t.Shard] = append(r.ticks[t.Shard], t)
		r.total++
	}
}

// firstBy returns node's earliest tick after the given time, on any shard.
func (r *foRecorder) firstBy(node string, after int64) (first s4check.Tick, found bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ts := range r.ticks {
		for _, t := range ts {
			if t.Node == node && t.UnixNano > after && (!found || t.UnixNano < first.UnixNano) {
				first, found = t, true
			}
		}
	}
	return first, found
}

// shard returns a copy of one shard's ticks, sorted by time.
func (r *foRecorder) shard(s uint32) []s4check.Tick {
	r.mu.Lock()
	out := slices.Clone(r.ticks[s])
	r.mu.Unlock()
	s4check.SortByTime(out)
	return out
}

// lastTick returns the time of the newest tick of shard s by node at epoch.
func (r *foRecorder) lastTick(s uint32, node string, epoch uint64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	ok := false
	for _, t := range r.ticks[s] {
		if t.Node == node && t.Epoch == epoch && t.UnixNano > last {
			last, ok = t.UnixNano, true
		}
	}
	return last, ok
}

// check counts S4 violations over everything recorded: ordered by time, a
// shard's epoch never goes back, and one epoch belongs to one node.
func (r *foRecorder) check() (ticks, violations int) {
	r.mu.Lock()
	shards := make([]uint32, 0, len(r.ticks))
	for s := range r.ticks {
		shards = append(shards, s)
	}
	r.mu.Unlock()
	slices.Sort(shards)
	for _, s := range shards {
		ts := r.shard(s)
		ticks += len(ts)
		violations += countViolations(ts)
	}
	return ticks, violations
}

// countViolations counts the ticks of one shard (sorted by time) that
// break S4 (s4check.Check).
func countViolations(ts []s4check.Tick) int {
	n := 0
	s4check.Check(ts, func(s4check.Violation) bool { n++; return true })
	return n
}

// handoff analyses one shard's ticks (sorted by time) around a change
// away from (oldNode, oldEpoch): first is the first tick at a higher epoch,
// last the last tick of the old owner at oldEpoch, overlap whether the old
// owner ticked at or after first.
func handoff(ts []s4check.Tick, oldNode string, oldEpoch uint64) (first s4check.Tick, last int64, found, overlap bool) {
	for _, t := range ts {
		if t.Epoch > oldEpoch {
			first, found = t, true
			break
		}
	}
	for _, t := range ts {
		if t.Node == oldNode && t.Epoch == oldEpoch {
			last = max(last, t.UnixNano)
		}
	}
	overlap = found && last >= first.UnixNano
	return first, last, found, overlap
}
