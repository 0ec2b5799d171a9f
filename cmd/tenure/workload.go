package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenurehq/tenure/cmd/tenure/internal/s4check"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
)

// Demo workload and witness defaults.
const (
	// defaultTickEvery is how often the demo workload ticks every shard the
	// node acts on.
	defaultTickEvery = 100 * time.Millisecond
	// witnessFlushEvery is the witness hook's batching period.
	witnessFlushEvery = 50 * time.Millisecond
	// witnessBuffer is how many ticks wait for the witness before new ones
	// are dropped.
	witnessBuffer = 1 << 16
	// witnessTimeout bounds one witness POST.
	witnessTimeout = 2 * time.Second
)

// tick is one unit of demo work on a shard, as the witness receives it.
type tick = s4check.Tick

// ownedShard is a shard the node acts on at an epoch.
type ownedShard struct {
	Shard uint32
	Epoch uint64
}

// actingSource reports the shards a node acts on right now.
type actingSource interface {
	Owned() []ownedShard
}

// jobProcessor runs the runnable jobs of the shards a node acts on.
type jobProcessor interface {
	ProcessJobs(ctx context.Context)
}

// workload is the demo workload: every tick it "works" on every shard the
// node acts on and reports each unit to the witness, if any. With jobs set
// it also processes the owned shards' jobs, on its own goroutine so commits
// never delay the ticks.
//
// With sample set (below every), it looks at the acting shards every
// sample but reports to the witness only every every, plus the first and
// the last sample of each acting stretch of a (shard, epoch): the witness
// then sees when acting started and stopped to within sample, at about
// the traffic of ticking every every. The first and last samples are what
// an overlap check and a handoff gap need (docs/benchmarks.md).
type workload struct {
	src     actingSource
	jobs    jobProcessor // nil: no job processing
	node    string
	every   time.Duration
	sample  time.Duration // 0 or ≥ every: every sample is reported
	witness *witness      // nil: no witness
	metrics *agentMetrics
	seq     uint64
	// stretch is each acting shard's current stretch: its epoch, samples
	// taken, and the latest sample not reported yet (held: zero Seq if none).
	stretch map[uint32]*stretch
}

// stretch is one shard's run of consecutive acting samples at an epoch.
type stretch struct {
	epoch uint64
	n     int
	held  tick
}

// run ticks until ctx ends.
func (w *workload) run(ctx context.Context) {
	if w.jobs != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			t := time.NewTicker(w.every)
			defer t.Stop()
			for {
				w.jobs.ProcessJobs(ctx)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	t := time.NewTicker(w.period())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.tickOnce()
	}
}

// period is how often the workload looks at its shards.
func (w *workload) period() time.Duration {
	if w.sample > 0 && w.sample < w.every {
		return w.sample
	}
	return w.every
}

// reportEvery is how many samples of a stretch go by per reported one.
func (w *workload) reportEvery() int {
	if w.sample <= 0 || w.sample >= w.every {
		return 1
	}
	return int(w.every / w.sample)
}

func (w *workload) tickOnce() {
	// The tick's timestamp is sandwiched between two acting checks: a
	// shard acting at the same epoch before and after it was acted on at
	// that instant, so the witness may compare timestamps across nodes.
	before := w.src.Owned()
	now := time.Now().UnixNano()
	after := w.src.Owned()
	still := make(map[uint32]uint64, len(after))
	for _, o := range after {
		still[o.Shard] = o.Epoch
	}
	if w.stretch == nil {
		w.stretch = make(map[uint32]*stretch)
	}
	acted := make(map[uint32]bool, len(before))
	k := w.reportEvery()
	for _, o := range before {
		if e, ok := still[o.Shard]; !ok || e != o.Epoch {
			continue
		}
		acted[o.Shard] = true
		w.seq++
		if w.metrics != nil {
			w.metrics.ticks.Inc()
		}
		t := tick{Shard: o.Shard, Epoch: o.Epoch, Node: w.node, Seq: w.seq, UnixNano: now}
		st := w.stretch[o.Shard]
		if st == nil || st.epoch != o.Epoch {
			if st != nil {
				w.report(st.held) // the last sample of the previous stretch
			}
			st = &stretch{epoch: o.Epoch}
			w.stretch[o.Shard] = st
		}
		if st.n%k == 0 {
			w.report(t)
			st.held = tick{}
		} else {
			st.held = t
		}
		st.n++
	}
	// A stretch that ended: its last sample is reported now.
	for s, st := range w.stretch {
		if !acted[s] {
			w.report(st.held)
			delete(w.stretch, s)
		}
	}
}

// report sends t to the witness, if any (a zero t is nothing to send).
func (w *workload) report(t tick) {
	if w.witness != nil && t.Seq != 0 {
		w.witness.record(t)
	}
}

// witness posts ticks to an external checker in JSON-array batches. record
// never blocks: when the buffer is full, ticks are dropped and counted.
type witness struct {
	url     string
	client  *http.Client
	log     *slog.Logger
	metrics *agentMetrics
	ticks   chan tick
	sent    atomic.Uint64
	dropped atomic.Uint64
}

func newWitness(url string, log *slog.Logger, m *agentMetrics) *witness {
	return &witness{url: url, client: &http.Client{Timeout: witnessTimeout}, log: log, metrics: m, ticks: make(chan tick, witnessBuffer)}
}

func (w *witness) record(t tick) {
	select {
	case w.ticks <- t:
	default:
		w.drop(1)
	}
}

func (w *witness) drop(n int) {
	w.dropped.Add(uint64(n))
	if w.metrics != nil {
		w.metrics.witnessDropped.Add(float64(n))
	}
}

// run sends batches every witnessFlushEvery until ctx ends, then flushes
// what is buffered once more (bounded by witnessTimeout).
func (w *witness) run(ctx context.Context) {
	t := time.NewTicker(witnessFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), witnessTimeout)
			w.flush(fctx)
			cancel()
			return
		case <-t.C:
			// A flush in flight when ctx ends must not fail and drop its
			// batch: the client's timeout bounds it instead.
			w.flush(context.WithoutCancel(ctx))
		}
	}
}

func (w *witness) flush(ctx context.Context) {
	var batch []tick
	for len(batch) < witnessBuffer {
		select {
		case t := <-w.ticks:
			batch = append(batch, t)
			continue
		default:
		}
		break
	}
	if len(batch) == 0 {
		return
	}
	if err := w.post(ctx, batch); err != nil {
		w.drop(len(batch))
		if w.metrics != nil {
			w.metrics.witnessErrors.Inc()
		}
		w.log.Warn("witness post failed; ticks dropped", "url", w.url, "ticks", len(batch), "err", err)
		return
	}
	w.sent.Add(uint64(len(batch)))
	if w.metrics != nil {
		w.metrics.witnessSent.Add(float64(len(batch)))
	}
}

func (w *witness) post(ctx context.Context, batch []tick) error {
	b, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("witness answered %s", resp.Status)
	}
	return nil
}
