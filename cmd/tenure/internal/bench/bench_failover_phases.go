package bench

// Where a drain's handoff gap goes (bench failover --mode drain), and the
// load it was measured under: a CPU burner beside the cluster (--burn), a
// disk fsync probe and the load average.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/s4check"
	"github.com/tenurehq/tenure/internal/benchkit"
)

// maxBurners bounds --burn.
const maxBurners = 64

// fsyncProbeEvery is how often the fsync probe writes and syncs.
const fsyncProbeEvery = 20 * time.Millisecond

// handoffPhases splits one shard's handoff gap at two instants every agent
// reports in GET /v1/moves (the At of the move, its clock when its replica
// showed the new owner): the control-group leader's and the new owner's.
// All agents run on one machine, so their clocks are one clock.
//
//	old owner's last tick ─ commit ─▶ leader applied ─ replicate ─▶ new owner applied ─ act ─▶ first tick
//
// Commit is the old owner's stop, its Transfer forwarded to the leader and
// committed (the leader's and a follower's fsync) and applied there;
// replicate is the new owner's replica learning that it committed and
// applying it; act is its agent and workload starting (the workload samples
// every --tick-sample).
type handoffPhases struct {
	CommitMs    float64 `json:"commit_ms"`
	ReplicateMs float64 `json:"replicate_ms"`
	ActMs       float64 `json:"act_ms"`
	// NewOwnerLeads: the new owner was the leader (replicate is 0).
	NewOwnerLeads bool `json:"new_owner_leads,omitempty"`
}

// phaseSummary is the "phases" object of the drain summary: p50 and p99 of
// each phase over the shards whose moves were found on both agents.
type phaseSummary struct {
	Samples        int     `json:"samples"`
	CommitP50Ms    float64 `json:"commit_p50_ms"`
	CommitP99Ms    float64 `json:"commit_p99_ms"`
	ReplicateP50Ms float64 `json:"replicate_p50_ms"`
	ReplicateP99Ms float64 `json:"replicate_p99_ms"`
	ActP50Ms       float64 `json:"act_p50_ms"`
	ActP99Ms       float64 `json:"act_p99_ms"`
}

func summarizePhases(ps []handoffPhases) *phaseSummary {
	if len(ps) == 0 {
		return nil
	}
	var c, r, a []float64
	for _, p := range ps {
		c, r, a = append(c, p.CommitMs), append(r, p.ReplicateMs), append(a, p.ActMs)
	}
	slices.Sort(c)
	slices.Sort(r)
	slices.Sort(a)
	return &phaseSummary{Samples: len(ps),
		CommitP50Ms: benchkit.NearestRank(c, 0.5), CommitP99Ms: benchkit.NearestRank(c, 0.99),
		ReplicateP50Ms: benchkit.NearestRank(r, 0.5), ReplicateP99Ms: benchkit.NearestRank(r, 0.99),
		ActP50Ms: benchkit.NearestRank(a, 0.5), ActP99Ms: benchkit.NearestRank(a, 0.99)}
}

// foMove is the part of GET /v1/moves the benchmark reads.
type foMove struct {
	At    time.Time `json:"at"`
	Shard uint32    `json:"shard"`
	Epoch uint64    `json:"epoch"`
	To    string    `json:"to"`
}

// moveSeen returns when agent a's replica showed shard s at epoch owned by
// to (its /v1/moves), if it still lists that move.
func (c *foCluster) moveSeen(ctx context.Context, a *foAgent, s uint32, epoch uint64, to string) (time.Time, bool) {
	var ms []foMove
	if err := c.get(ctx, a, "/v1/moves", &ms); err != nil {
		return time.Time{}, false
	}
	for _, m := range ms {
		if m.Shard == s && m.Epoch == epoch && m.To == to {
			return m.At, true
		}
	}
	return time.Time{}, false
}

// leaderAgent returns the control-group leader as a running agent sees it.
func (c *foCluster) leaderAgent(ctx context.Context) *foAgent {
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		var st foStatus
		if err := c.get(ctx, a, "/v1/status", &st); err == nil && st.ControlLeader != "" {
			return c.agent(st.ControlLeader)
		}
	}
	return nil
}

// phasesOf splits a handoff of shard s (last tick of the old owner at last,
// first tick of the new owner) into handoffPhases, reading the moves of the
// leader and of the new owner; ok is false when either no longer lists it.
func (c *foCluster) phasesOf(ctx context.Context, leader *foAgent, s uint32, last int64, first s4check.Tick) (handoffPhases, bool) {
	newOwner := c.agent(first.Node)
	if leader == nil || newOwner == nil {
		return handoffPhases{}, false
	}
	atLeader, ok1 := c.moveSeen(ctx, leader, s, first.Epoch, first.Node)
	atNew, ok2 := c.moveSeen(ctx, newOwner, s, first.Epoch, first.Node)
	if !ok1 || !ok2 {
		return handoffPhases{}, false
	}
	return handoffPhases{
		CommitMs:      ms(time.Duration(atLeader.UnixNano() - last)),
		ReplicateMs:   ms(atNew.Sub(atLeader)),
		ActMs:         ms(time.Duration(first.UnixNano - atNew.UnixNano())),
		NewOwnerLeads: leader == newOwner,
	}, true
}

// burner runs n CPU-bound processes (busy shell loops, at the agents'
// priority) beside the cluster until stop.
type burner struct {
	cmds []*exec.Cmd
}

func startBurner(n int) (*burner, error) {
	b := &burner{}
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = childProcAttr()
		if err := cmd.Start(); err != nil {
			b.stop()
			return nil, fmt.Errorf("bench: start CPU burner: %w", err)
		}
		b.cmds = append(b.cmds, cmd)
	}
	return b, nil
}

func (b *burner) stop() {
	if b == nil {
		return
	}
	for _, cmd := range b.cmds {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	b.cmds = nil
}

// fsyncProbe writes 4 KiB and fsyncs a file in dir every fsyncProbeEvery,
// recording how long each fsync took: the disk the agents' Raft logs are
// on, under the same load.
type fsyncProbe struct {
	mu   sync.Mutex
	took []float64 // ms
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func startFsyncProbe(dir string) (*fsyncProbe, error) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	p := &fsyncProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer f.Close()
		buf := make([]byte, 4096)
		t := time.NewTicker(fsyncProbeEvery)
		defer t.Stop()
		for i := int64(0); ; i++ {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			if _, err := f.WriteAt(buf, (i%256)*4096); err != nil {
				return
			}
			t0 := time.Now()
			if err := f.Sync(); err != nil {
				return
			}
			p.mu.Lock()
			p.took = append(p.took, ms(time.Since(t0)))
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// finish stops the probe (once; later calls only read) and returns its
// fsync p50, p99 and sample count.
func (p *fsyncProbe) finish() (p50, p99 float64, n int) {
	if p == nil {
		return 0, 0, 0
	}
	p.once.Do(func() { close(p.stop) })
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	s := slices.Clone(p.took)
	slices.Sort(s)
	return benchkit.NearestRank(s, 0.5), benchkit.NearestRank(s, 0.99), len(s)
}

// loadAverage returns the 1-minute load average (Linux /proc/loadavg; 0
// when unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
