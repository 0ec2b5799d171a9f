package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/tenurehq/tenure/cmd/tenure/internal/s4check"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// maxWitnessTicks bounds the ticks a checker keeps; later ticks are
// counted but not stored.
const maxWitnessTicks = 4 << 20

func init() {
	register("witness", "run a checker for agents' --witness ticks: no overlap, epochs only increase", runWitness)
}

// witnessChecker collects agents' ticks and checks that no two nodes acted
// on one shard at once: ordered by time, a shard's ticks never go back to
// a lower epoch, and one epoch belongs to one node.
type witnessChecker struct {
	mu      sync.Mutex
	ticks   map[uint32][]tick
	total   int
	ignored int
}

func newWitnessChecker() *witnessChecker { return &witnessChecker{ticks: map[uint32][]tick{}} }

// ServeHTTP accepts a JSON array of ticks (or a single tick).
func (c *witnessChecker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "POST a JSON array of ticks")
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s4check.MaxBody))
	raw := json.RawMessage{}
	if err := dec.Decode(&raw); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	batch, err := s4check.DecodeBatch(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	c.add(batch)
	w.WriteHeader(http.StatusNoContent)
}

func (c *witnessChecker) add(batch []tick) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range batch {
		c.total++
		if c.total > maxWitnessTicks {
			c.ignored++
			continue
		}
		c.ticks[t.Shard] = append(c.ticks[t.Shard], t)
	}
}

// witnessReport is the checker's verdict.
type witnessReport struct {
	Ticks      int      `json:"ticks"`
	Shards     int      `json:"shards"`
	Ignored    int      `json:"ignored"`
	Violations []string `json:"violations"`
}

// check orders each shard's ticks by time and reports every overlap.
// At most maxViolations are listed.
func (c *witnessChecker) check(maxViolations int) witnessReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := witnessReport{Ticks: c.total, Shards: len(c.ticks), Ignored: c.ignored, Violations: []string{}}
	shards := make([]uint32, 0, len(c.ticks))
	for s := range c.ticks {
		shards = append(shards, s)
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i] < shards[j] })
	for _, s := range shards {
		ts := c.ticks[s]
		s4check.SortByTime(ts)
		s4check.Check(ts, func(v s4check.Violation) bool {
			r.Violations = append(r.Violations, v.String())
			return len(r.Violations) < maxViolations
		})
		if len(r.Violations) >= maxViolations {
			return r
		}
	}
	return r
}

// ticksOf returns a copy of one shard's ticks ordered by time.
func (c *witnessChecker) ticksOf(shard uint32) []tick {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := append([]tick(nil), c.ticks[shard]...)
	s4check.SortByTime(ts)
	return ts
}

func runWitness(ctx context.Context, m *Main, args []string) error {
	fs := flag.NewFlagSet("witness", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	listen := fs.String("listen", "127.0.0.1:7999", "address to accept ticks on (point agents' --witness at http://<this>/)")
	every := fs.Duration("report", 5*time.Second, "how often to print the verdict")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	c := newWitnessChecker()
	mux := http.NewServeMux()
	mux.Handle("/", c)
	mux.HandleFunc("/report", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, c.check(100)) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	fmt.Fprintf(m.Stdout, "witness listening on http://%s/ (verdict at /report)\n", l.Addr())
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = srv.Close()
			r := c.check(100)
			fmt.Fprintf(m.Stdout, "final: %d ticks on %d shards, %d violations\n", r.Ticks, r.Shards, len(r.Violations))
			if len(r.Violations) > 0 {
				for _, v := range r.Violations {
					fmt.Fprintln(m.Stdout, "  "+v)
				}
				return errors.New("witness: overlapping owners seen")
			}
			return nil
		case <-t.C:
			r := c.check(10)
			fmt.Fprintf(m.Stdout, "%s: %d ticks on %d shards, %d violations\n", time.Now().Format("15:04:05"), r.Ticks, r.Shards, len(r.Violations))
			for _, v := range r.Violations {
				fmt.Fprintln(m.Stdout, "  "+v)
			}
		}
	}
}
