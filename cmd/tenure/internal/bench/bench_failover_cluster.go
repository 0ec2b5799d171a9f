package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/benchkit"
)

// foAgent is one agent process of the benchmark cluster.
type foAgent struct {
	id                     string
	gossip, raft, httpAddr string
	cmd                    *exec.Cmd
	exited                 chan struct{}
	logf                   *os.File
}

func (a *foAgent) running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// foCluster runs the agents.
type foCluster struct {
	bin     string
	dir     string
	opts    failoverOptions
	witness string
	log     func(string, ...any)
	agents  []*foAgent
	client  http.Client
	// tlsDir holds ca.pem and each agent's <id>.pem, <id>-key.pem when
	// opts.tls is set (made by start).
	tlsDir string
}

func (c *foCluster) start(ctx context.Context) error {
	c.client = http.Client{Timeout: 5 * time.Second}
	addrs, err := benchkit.FreeLoopbackAddrs(3 * c.opts.nodes)
	if err != nil {
		return err
	}
	for i := range c.opts.nodes {
		c.agents = append(c.agents, &foAgent{
			id:     fmt.Sprintf("bench-%02d", i),
			gossip: addrs[3*i], raft: addrs[3*i+1], httpAddr: addrs[3*i+2],
		})
	}
	if c.opts.tls {
		ids := make([]string, 0, len(c.agents))
		for _, a := range c.agents {
			ids = append(ids, a.id)
		}
		c.tlsDir = filepath.Join(c.dir, "tls")
		if err := writeNodeCerts(c.tlsDir, ids); err != nil {
			return err
		}
	}
	for _, a := range c.agents {
		if err := c.spawn(a); err != nil {
			return err
		}
	}
	return nil
}

func (c *foCluster) agentArgs(a *foAgent) []string {
	seeds := []string{c.agents[0].gossip, c.agents[1].gossip, c.agents[2].gossip}
	logLevel := c.opts.agentLogLevel
	if logLevel == "" {
		logLevel = "warn"
	}
	args := []string{"agent",
		"--node-id", a.id,
		"--data-dir", filepath.Join(c.dir, a.id),
		"--seeds", strings.Join(seeds, ","),
		"--bootstrap-expect", "3",
		"--gossip-addr", a.gossip,
		"--raft-addr", a.raft,
		"--http-addr", a.httpAddr,
		"--profile", c.opts.profile,
		"--partitions", strconv.Itoa(c.opts.partitions),
		"--witness", c.witness,
		"--tick", c.opts.tick.String(),
		"--tick-sample", c.opts.tickSample.String(),
		"--drain-timeout", "5s",
		"--log-format", "json",
		"--log-level", logLevel,
	}
	if c.opts.fencedAfter > 0 {
		args = append(args, "--fenced-after", c.opts.fencedAfter.String())
	}
	if c.tlsDir != "" {
		args = append(args, tlsArgs(c.tlsDir, a.id)...)
	}
	return args
}

func (c *foCluster) spawn(a *foAgent) error { return spawnAgent(c.bin, c.dir, a, c.agentArgs(a)) }

// spawnAgent starts agent a as `bin args…`, its output appended to
// dir/<id>.log, and closes a.exited when the process is gone.
func spawnAgent(bin, dir string, a *foAgent, args []string) error {
	return spawnAgentWith(bin, dir, a, args, agentProc{})
}

// agentProc is how an agent process is run beyond its arguments.
type agentProc struct {
	// nice > 0 runs it under `nice -n nice` (lower CPU priority).
	nice int
	// env is added to the inherited environment (GOMAXPROCS=1).
	env []string
}

// spawnAgentWith is spawnAgent with p.
func spawnAgentWith(bin, dir string, a *foAgent, args []string, p agentProc) error {
	lf, err := os.OpenFile(filepath.Join(dir, a.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	if p.nice > 0 {
		// nice execs the agent: the process (and its pid) is the agent's.
		cmd = exec.Command("nice", append([]string{"-n", strconv.Itoa(p.nice), bin}, args...)...)
	}
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start agent %s: %w", a.id, err)
	}
	a.cmd, a.logf, a.exited = cmd, lf, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		lf.Close()
		close(done)
	}(a.exited)
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (a *foAgent) kill() {
	if !a.running() {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// stopAgents sends SIGTERM to every running agent at once, then SIGKILL
// to those still running after grace. It reports how long after the
// SIGTERM the last one exited (grace if one had to be killed) and the
// agents that did not exit with status 0 by themselves, as "id: why".
func stopAgents(agents []*foAgent, grace time.Duration) (took time.Duration, unclean []string) {
	t0 := time.Now()
	var stopping []*foAgent
	for _, a := range agents {
		if a.running() {
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			stopping = append(stopping, a)
		}
	}
	deadline := time.After(grace)
wait:
	for _, a := range stopping {
		select {
		case <-a.exited:
		case <-deadline:
			break wait
		}
	}
	took = time.Since(t0)
	for _, a := range stopping {
		if a.running() {
			unclean = append(unclean, a.id+": still running after "+grace.String()+", killed")
			a.kill()
			continue
		}
		if code := a.cmd.ProcessState.ExitCode(); code != 0 {
			unclean = append(unclean, fmt.Sprintf("%s: exit status %d", a.id, code))
		}
	}
	return took, unclean
}

// stopAll stops every agent: SIGTERM, then SIGKILL after 10 s.
func (c *foCluster) stopAll() { stopAgents(c.agents, 10*time.Second) }

func (c *foCluster) get(ctx context.Context, a *foAgent, path string, out any) error {
	return agentGet(ctx, &c.client, a, path, out)
}

// post POSTs to path on a with no body; a drain may take a minute to answer.
func (c *foCluster) post(ctx context.Context, a *foAgent, path string) error {
	cl := http.Client{Timeout: 2 * time.Minute}
	return agentPost(ctx, &cl, a, path, nil)
}

// foShard is the part of GET /v1/shards the benchmark reads.
type foShard struct {
	Shard uint32 `json:"shard"`
	Owner string `json:"owner"`
	Epoch uint64 `json:"epoch"`
	State string `json:"state"`
	Valid bool   `json:"valid"`
}

// shards reads the shard table from the first running agent that answers.
func (c *foCluster) shards(ctx context.Context, except string) ([]foShard, error) {
	var last error = errors.New("no agent running")
	for _, a := range c.agents {
		if !a.running() || a.id == except {
			continue
		}
		var out []foShard
		if err := c.get(ctx, a, "/v1/shards", &out); err != nil {
			last = err
			continue
		}
		return out, nil
	}
	return nil, last
}

func (c *foCluster) agent(id string) *foAgent {
	for _, a := range c.agents {
		if a.id == id {
			return a
		}
	}
	return nil
}

// waitSettled waits until every agent runs and answers, every shard is
// validly owned (none revoking) by a running agent, and the witness saw
// every shard's owner tick at its epoch.
func (c *foCluster) waitSettled(ctx context.Context, rec *foRecorder, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	why := "not checked"
	for {
		ok, reason := c.settled(ctx, rec)
		if ok {
			return nil
		}
		why = reason
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster did not settle within %v: %s (agent logs in %s)", limit, why, c.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *foCluster) settled(ctx context.Context, rec *foRecorder) (bool, string) {
	for _, a := range c.agents {
		if !a.running() {
			return false, "agent " + a.id + " exited (see its log)"
		}
		if err := c.get(ctx, a, "/healthz", nil); err != nil {
			return false, a.id + ": " + err.Error()
		}
	}
	sh, err := c.shards(ctx, "")
	if err != nil {
		return false, err.Error()
	}
	if len(sh) != c.opts.partitions {
		return false, fmt.Sprintf("%d shards in the table, want %d", len(sh), c.opts.partitions)
	}
	recent := time.Now().Add(-time.Second).UnixNano()
	owned := map[string]int{}
	for _, s := range sh {
		owned[s.Owner]++
		if s.State != "owned" || !s.Valid || c.agent(s.Owner) == nil {
			return false, fmt.Sprintf("shard %d is %s (valid %v) by %q", s.Shard, s.State, s.Valid, s.Owner)
		}
		if t, ok := rec.lastTick(s.Shard, s.Owner, s.Epoch); !ok || t < recent {
			return false, fmt.Sprintf("shard %d: no recent tick from %s at epoch %d", s.Shard, s.Owner, s.Epoch)
		}
	}
	// A restarted or undrained agent is back in the placement ring (and
	// the rebalance towards it has begun) once it owns a shard again.
	for _, a := range c.agents {
		if owned[a.id] == 0 {
			return false, a.id + " owns no shard yet"
		}
	}
	return true, ""
}

// idleUsage samples the agents' RSS and CPU over window; it returns the
// medians (MiB, percent of one core).
func (c *foCluster) idleUsage(ctx context.Context, window time.Duration) (rssMB, cpuPct float64) {
	var cpu0 []time.Duration
	for _, a := range c.agents {
		cpu0 = append(cpu0, pidCPU(a.cmd.Process.Pid))
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(window):
	}
	wall := time.Since(t0)
	var rss, cpu []float64
	for i, a := range c.agents {
		rss = append(rss, pidRSSMB(a.cmd.Process.Pid))
		cpu = append(cpu, 100*(pidCPU(a.cmd.Process.Pid)-cpu0[i]).Seconds()/wall.Seconds())
	}
	slices.Sort(rss)
	slices.Sort(cpu)
	return benchkit.NearestRank(rss, 0.5), benchkit.NearestRank(cpu, 0.5)
}

// foStatus is the part of GET /v1/status the benchmark reads.
type foStatus struct {
	ControlLeader string   `json:"control_leader"`
	Voters        []string `json:"voters"`
}

// role reports id's control-group role as a running agent sees it.
func (c *foCluster) role(ctx context.Context, id string) string {
	for _, a := range c.agents {
		if !a.running() {
			continue
		}
		var st foStatus
		if err := c.get(ctx, a, "/v1/status", &st); err != nil {
			continue
		}
		switch {
		case st.ControlLeader == id:
			return "leader"
		case slices.Contains(st.Voters, id):
			return "voter"
		}
		return "member"
	}
	return "?"
}
