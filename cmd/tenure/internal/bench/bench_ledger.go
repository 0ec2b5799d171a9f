package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/commit"
	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
	"github.com/tenurehq/tenure/internal/benchkit"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ledger/raftstore"
)

func init() {
	registerBench("ledger", "ledger commit throughput: 3 raft voters over loopback TCP, bolt fsync, job transitions", runBenchLedger)
}

// ledgerBenchRow is one line of `tenure bench ledger --json`.
type ledgerBenchRow struct {
	Proposers         int     `json:"proposers"`
	Transitions       int64   `json:"transitions"`
	Seconds           float64 `json:"seconds"`
	TransitionsPerSec float64 `json:"transitions_per_sec"`
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	LogEntries        uint64  `json:"log_entries"`
}

func runBenchLedger(ctx context.Context, m *Env, args []string) error {
	fs := flag.NewFlagSet("bench ledger", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per proposer count")
	dur := fs.Duration("duration", 3*time.Second, "measured time per proposer count")
	list := fs.String("proposers", "1,16,64,256", "comma-separated proposer counts")
	noBatch := fs.Bool("no-batch", false, "one log entry per transition (no Batcher)")
	inflight := fs.Int("inflight", 0, "Batcher MaxInFlight (0: default)")
	linger := fs.Duration("linger", 0, "Batcher Linger")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	dir := fs.String("dir", "", "data dir parent (default: a temp dir, removed afterwards)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *dur <= 0 {
		return fmt.Errorf("bench ledger: -duration %v must be positive", *dur)
	}
	var counts []int
	for _, s := range strings.Split(*list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100_000 {
			return fmt.Errorf("bench ledger: bad proposer count %q", s)
		}
		counts = append(counts, n)
	}
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	parent, cleanup, err := benchkit.WorkDir(*dir, "tenure-bench-ledger-")
	if err != nil {
		return err
	}
	defer cleanup()
	c, err := startBenchCluster(ctx, parent)
	if err != nil {
		return err
	}
	defer c.close()
	if !*asJSON {
		fmt.Fprintf(m.Stdout, "3 voters, loopback TCP, bolt fsync, %v per step, batching %v\n", *dur, !*noBatch)
		fmt.Fprintf(m.Stdout, "%10s %14s %10s %10s %12s\n", "proposers", "transitions/s", "p50_ms", "p99_ms", "log_entries")
	}
	base := uint32(0)
	for _, n := range counts {
		row, err := c.run(ctx, n, base, *dur, *noBatch, commit.BatcherConfig{MaxInFlight: *inflight, Linger: *linger})
		if err != nil {
			return err
		}
		base += uint32(n)
		if *asJSON {
			b, _ := json.Marshal(row)
			fmt.Fprintln(m.Stdout, string(b))
		} else {
			fmt.Fprintf(m.Stdout, "%10d %14.0f %10.2f %10.2f %12d\n", row.Proposers, row.TransitionsPerSec, row.P50Ms, row.P99Ms, row.LogEntries)
		}
	}
	return nil
}

type benchCluster struct {
	rafts  []*raft.Raft
	fsms   []*ledger.FSM
	stores []*raftstore.Store
	trans  []*raft.NetworkTransport
	leader *raft.Raft
	lfsm   *ledger.FSM
}

func startBenchCluster(ctx context.Context, parent string) (*benchCluster, error) {
	c := &benchCluster{}
	var servers []raft.Server
	for i := range 3 {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 8, 10*time.Second, io.Discard)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("bench ledger: transport: %w", err)
		}
		c.trans = append(c.trans, tr)
		servers = append(servers, raft.Server{ID: raft.ServerID("n" + strconv.Itoa(i)), Address: tr.LocalAddr()})
	}
	for i := range 3 {
		st, err := raftstore.OpenStore(filepath.Join(parent, "n"+strconv.Itoa(i)), raftstore.StoreOptions{})
		if err != nil {
			c.close()
			return nil, err
		}
		c.stores = append(c.stores, st)
		f, err := ledger.NewFSM(ledger.DefaultConfig())
		if err != nil {
			c.close()
			return nil, err
		}
		c.fsms = append(c.fsms, f)
		cfg := raft.DefaultConfig()
		cfg.LocalID = servers[i].ID
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
		cfg.BatchApplyCh = true
		cfg.MaxAppendEntries = 256
		r, err := raft.NewRaft(cfg, f, st.Log, st.Stable, st.Snapshots, c.trans[i])
		if err != nil {
			c.close()
			return nil, fmt.Errorf("bench ledger: raft: %w", err)
		}
		c.rafts = append(c.rafts, r)
	}
	if err := c.rafts[0].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		c.close()
		return nil, fmt.Errorf("bench ledger: bootstrap: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.leader == nil {
		for i, r := range c.rafts {
			if r.State() == raft.Leader {
				c.leader, c.lfsm = r, c.fsms[i]
			}
		}
		if c.leader != nil {
			break
		}
		if time.Now().After(deadline) {
			c.close()
			return nil, errors.New("bench ledger: no leader within 30s")
		}
		select {
		case <-ctx.Done():
			c.close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c, nil
}

func (c *benchCluster) close() {
	for _, r := range c.rafts {
		_ = r.Shutdown().Error()
	}
	for _, t := range c.trans {
		_ = t.Close()
	}
	for _, s := range c.stores {
		_ = s.Close()
	}
}

// run measures n proposers, each cycling enqueue → start → complete on its
// own shard (base+i); every committed, accepted command is one transition.
func (c *benchCluster) run(ctx context.Context, n int, base uint32, dur time.Duration, noBatch bool, bcfg commit.BatcherConfig) (ledgerBenchRow, error) {
	applier := commit.RaftApplier{Raft: c.leader, Timeout: 10 * time.Second}
	var apply func(context.Context, ledger.Command) (ledger.Result, error)
	if noBatch {
		apply = func(ctx context.Context, cmd ledger.Command) (ledger.Result, error) {
			b, err := ledger.Encode(cmd)
			if err != nil {
				return ledger.Result{}, err
			}
			return applier.Apply(ctx, b)
		}
	} else {
		b, err := commit.NewBatcher(applier, bcfg)
		if err != nil {
			return ledgerBenchRow{}, err
		}
		defer b.Close()
		apply = b.Apply
	}
	must := func(cmd ledger.Command) (ledger.Result, error) {
		r, err := apply(ctx, cmd)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			return r, fmt.Errorf("bench ledger: %T: %w", cmd, err)
		}
		return r, nil
	}
	now := time.Now().UnixNano()
	hb, err := must(ledger.Heartbeat{Node: "worker", Incarnation: 1, Now: now})
	if err != nil {
		return ledgerBenchRow{}, err
	}
	epochs := make([]uint64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shard := base + uint32(i)
			r, err := must(ledger.Grant{Shard: shard, Owner: "worker", OwnerIncarnation: 1, OwnerLiveness: hb.Node.Liveness, Now: now, Reason: "bench"})
			if err != nil {
				errs <- err
				return
			}
			epochs[i] = r.Shard.Epoch
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return ledgerBenchRow{}, err
	default:
	}
	startIndex := c.leader.LastIndex()
	var total atomic.Int64
	lat := make([][]time.Duration, n)
	stop := make(chan struct{})
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shard, epoch := base+uint32(i), epochs[i]
			step := func(cmd ledger.Command) (ledger.Result, bool) {
				t0 := time.Now()
				r, err := must(cmd)
				if err != nil {
					errs <- err
					return r, false
				}
				lat[i] = append(lat[i], time.Since(t0))
				total.Add(1)
				return r, true
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now().UnixNano()
				r, ok := step(ledger.JobEnqueue{Shard: shard, Type: "bench", Now: now})
				if !ok {
					return
				}
				id := r.Job.ID
				if _, ok := step(ledger.JobStart{Shard: shard, Epoch: epoch, Owner: "worker", Job: id, Timeout: int64(time.Minute), Now: now}); !ok {
					return
				}
				if _, ok := step(ledger.JobComplete{Shard: shard, Epoch: epoch, Job: id, Attempt: 1, Now: now}); !ok {
					return
				}
			}
		}()
	}
	t := time.NewTimer(dur)
	select {
	case <-t.C:
	case <-ctx.Done():
	case err := <-errs:
		close(stop)
		wg.Wait()
		return ledgerBenchRow{}, err
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errs:
		return ledgerBenchRow{}, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return ledgerBenchRow{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond)
	}
	return ledgerBenchRow{
		Proposers:         n,
		Transitions:       total.Load(),
		Seconds:           elapsed.Seconds(),
		TransitionsPerSec: float64(total.Load()) / elapsed.Seconds(),
		P50Ms:             pct(0.50),
		P99Ms:             pct(0.99),
		LogEntries:        c.leader.LastIndex() - startIndex,
	}, nil
}
