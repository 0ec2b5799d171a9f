package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func init() {
	register("demo", "run a local cluster of agents on loopback with a dashboard (Ctrl-C stops it)", runDemo)
}

// Demo defaults.
const (
	defaultDemoNodes      = 5
	defaultDemoPartitions = 64
	demoReadyTimeout      = 90 * time.Second
	demoStopGrace         = 20 * time.Second
)

// demoAgent is one agent process of the demo.
type demoAgent struct {
	id                 string
	gossip, raft, http string
	logPath            string
	args               []string // the agent's flags (restart reuses them)
	cmd                *exec.Cmd
	exited             chan struct{}
	exitErr            error
}

// demoCluster is a running demo: agents plus a witness checker.
type demoCluster struct {
	exe     string // the tenure binary the agents run
	dir     string
	agents  []*demoAgent
	witness *witnessChecker
	wsrv    *http.Server
	wurl    string
}

func runDemo(ctx context.Context, m *Main, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	nodes := fs.Int("nodes", defaultDemoNodes, "number of agents (3..9)")
	partitions := fs.Int("partitions", defaultDemoPartitions, "number of shards")
	profile := fs.String("profile", "fast", "lease timing profile: fast, default or safe")
	dir := fs.String("dir", "", "directory for the agents' data and logs (default: a new temp dir, removed at exit)")
	bin := fs.String("agent-bin", "", "tenure binary to run the agents with (default: this executable)")
	fs.Usage = func() {
		fmt.Fprintln(m.Stderr, "usage: tenure demo [--nodes 5] [--partitions 64] [--profile fast]")
		fs.PrintDefaults()
	}
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *nodes < 3 || *nodes > 9 {
		return fmt.Errorf("demo: --nodes %d: want 3..9", *nodes)
	}
	if *partitions < 1 || *partitions > 4096 {
		return fmt.Errorf("demo: --partitions %d: want 1..4096", *partitions)
	}
	switch *profile {
	case "fast", "default", "safe":
	default:
		return fmt.Errorf("demo: --profile %q: want fast, default or safe", *profile)
	}
	exe := *bin
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("demo: finding the tenure executable: %w", err)
		}
	}
	keep := *dir != ""
	if !keep {
		d, err := os.MkdirTemp("", "tenure-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		*dir = d
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("demo: --dir: %w", err)
	}

	dc, err := startDemo(exe, *dir, *nodes, *partitions, *profile)
	if dc != nil {
		defer func() {
			dc.stop(m.Stdout)
			if !keep {
				_ = os.RemoveAll(*dir)
			}
		}()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "waiting for %d agents to form the cluster…\n", *nodes)
	if err := dc.waitReady(ctx, demoReadyTimeout); err != nil {
		return err
	}
	dc.printIntro(m.Stdout, *profile, *partitions)

	// Report agents that exit (killed by the user, crashed) until Ctrl-C.
	exited := make(chan *demoAgent, len(dc.agents))
	for _, a := range dc.agents {
		go func() {
			select {
			case <-a.exited:
				exited <- a
			case <-ctx.Done():
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(m.Stdout, "\nstopping the demo cluster (each agent drains and leaves)…")
			return nil
		case a := <-exited:
			fmt.Fprintf(m.Stdout, "%s %s (pid %d) exited: %v — its shards fail over to the others; its log: %s\n",
				time.Now().Format("15:04:05"), a.id, a.cmd.Process.Pid, a.exitErr, a.logPath)
		}
	}
}

// startDemo starts the witness and the agents. On error the returned
// cluster (if not nil) holds what was started, for stop.
func startDemo(exe, dir string, nodes, partitions int, profile string, extra ...string) (*demoCluster, error) {
	dc := &demoCluster{exe: exe, dir: dir, witness: newWitnessChecker()}
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: witness listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", dc.witness)
	mux.HandleFunc("/report", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, dc.witness.check(100)) })
	dc.wsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	dc.wurl = "http://" + wl.Addr().String() + "/"
	go func() { _ = dc.wsrv.Serve(wl) }()

	ports, err := freePorts(3 * nodes)
	if err != nil {
		return dc, fmt.Errorf("demo: %w", err)
	}
	for i := range nodes {
		dc.agents = append(dc.agents, &demoAgent{
			id:      "n" + strconv.Itoa(i+1),
			gossip:  "127.0.0.1:" + strconv.Itoa(ports[3*i]),
			raft:    "127.0.0.1:" + strconv.Itoa(ports[3*i+1]),
			http:    "127.0.0.1:" + strconv.Itoa(ports[3*i+2]),
			logPath: filepath.Join(dir, "n"+strconv.Itoa(i+1)+".log"),
			exited:  make(chan struct{}),
		})
	}
	// The demo runs as a deployment should: mutual TLS on the Raft/RPC port.
	tlsDir := filepath.Join(dir, "tls")
	ids := make([]string, 0, len(dc.agents))
	for _, a := range dc.agents {
		ids = append(ids, a.id)
	}
	quiet := &Main{Stdout: io.Discard, Stderr: io.Discard}
	if err := quiet.Run(context.Background(), []string{"tls", "init", "--dir", tlsDir, "--nodes", strings.Join(ids, ","), "--force"}); err != nil {
		return dc, fmt.Errorf("demo: certificates: %w", err)
	}
	seeds := make([]string, 0, 3)
	for _, a := range dc.agents[:3] {
		seeds = append(seeds, a.gossip)
	}
	for _, a := range dc.agents {
		a.args = append([]string{"agent",
			"--node-id", a.id, "--data-dir", filepath.Join(dir, a.id),
			"--gossip-addr", a.gossip, "--raft-addr", a.raft, "--http-addr", a.http,
			"--seeds", strings.Join(seeds, ","), "--bootstrap-expect", "3",
			"--profile", profile, "--partitions", strconv.Itoa(partitions),
			"--witness", dc.wurl, "--log-format", "json", "--drain-timeout", "3s",
			"--tls-ca", filepath.Join(tlsDir, "ca.pem"), "--tls-cert", filepath.Join(tlsDir, a.id+".pem"),
			"--tls-key", filepath.Join(tlsDir, a.id+"-key.pem")}, extra...)
		if err := dc.startAgent(a, exe); err != nil {
			return dc, err
		}
	}
	return dc, nil
}

// startAgent starts (or, once it has exited, restarts) a with binary exe
// and its flags, appending to its log.
func (dc *demoCluster) startAgent(a *demoAgent, exe string) error {
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	a.cmd = exec.Command(exe, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	// Identity comes from the flags; keep the user's HOSTNAME out.
	a.cmd.Env = append(os.Environ(), "HOSTNAME=", "CLUSTER_NAME=", "TENURE_CONFIG=")
	a.exited, a.exitErr = make(chan struct{}), nil
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("demo: starting %s: %w", a.id, err)
	}
	cmd, exited := a.cmd, a.exited
	go func() {
		err := cmd.Wait()
		logf.Close()
		a.exitErr = err
		close(exited)
	}()
	return nil
}

// waitReady waits until every agent's /readyz answers 200.
func (dc *demoCluster) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		ready := 0
		for _, a := range dc.agents {
			select {
			case <-a.exited:
				return fmt.Errorf("demo: %s exited while starting (%v); its log:\n%s", a.id, a.exitErr, tail(a.logPath, 20))
			default:
			}
			if resp, err := hc.Get("http://" + a.http + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready++
				}
			}
		}
		if ready == len(dc.agents) {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("demo: only %d of %d agents ready after %s; logs in %s; first agent's log:\n%s", ready, len(dc.agents), timeout, dc.dir, tail(dc.agents[0].logPath, 20))
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (dc *demoCluster) printIntro(w io.Writer, profile string, partitions int) {
	a0 := dc.agents[0]
	fmt.Fprintf(w, "\ntenure demo: %d agents on loopback (profile %s, %d shards), data and logs in %s\n\n", len(dc.agents), profile, partitions, dc.dir)
	fmt.Fprintf(w, "  dashboard  http://%s/\n\n", a0.http)
	for _, a := range dc.agents {
		fmt.Fprintf(w, "  %-3s pid %-7d http %-21s gossip %-21s log %s\n", a.id, a.cmd.Process.Pid, a.http, a.gossip, a.logPath)
	}
	victim, drained := dc.agents[len(dc.agents)-1], dc.agents[len(dc.agents)-2]
	cli := cliPath(dc.exe)
	fmt.Fprintf(w, "\ntry:\n")
	fmt.Fprintf(w, "  %s status --addr %s           # control group, health, members\n", cli, a0.http)
	fmt.Fprintf(w, "  %s shards --addr %s           # who owns what, at which epoch\n", cli, a0.http)
	fmt.Fprintf(w, "  kill -9 %d                          # crash %s: its shards fail over\n", victim.cmd.Process.Pid, victim.id)
	fmt.Fprintf(w, "  %s drain --addr %s            # hand %s's shards over with zero overlap\n", cli, drained.http, drained.id)
	fmt.Fprintf(w, "  %s jobs enqueue --addr %s --type demo --key order-1\n", cli, a0.http)
	fmt.Fprintf(w, "  %s moves --addr %s            # recent moves and why\n", cli, a0.http)
	fmt.Fprintf(w, "\nevery agent reports its work to a witness at %s; its verdict (no two owners at once) prints at exit: %sreport\n", dc.wurl, dc.wurl)
	fmt.Fprintf(w, "Ctrl-C stops the cluster.\n")
}

// stop sends SIGTERM to every running agent, waits for them to drain and
// exit (SIGKILL after demoStopGrace) and prints the witness verdict.
func (dc *demoCluster) stop(w io.Writer) {
	var wg sync.WaitGroup
	for _, a := range dc.agents {
		if a.cmd == nil || a.cmd.Process == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-a.exited:
				return
			default:
			}
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-a.exited:
			case <-time.After(demoStopGrace):
				_ = a.cmd.Process.Kill()
				<-a.exited
			}
		}()
	}
	wg.Wait()
	if dc.wsrv != nil {
		_ = dc.wsrv.Close()
		r := dc.witness.check(10)
		fmt.Fprintf(w, "witness: %d ticks on %d shards, %d overlaps\n", r.Ticks, r.Shards, len(r.Violations))
		for _, v := range r.Violations {
			fmt.Fprintln(w, "  "+v)
		}
	}
}

// freePorts returns n distinct loopback ports free for both TCP and UDP
// (memberlist uses both on its port) at the time of the call.
func freePorts(n int) ([]int, error) {
	var ports []int
	var hold []io.Closer
	defer func() {
		for _, c := range hold {
			c.Close()
		}
	}()
	for tries := 0; len(ports) < n && tries < 100*n; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding free ports: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			l.Close()
			continue
		}
		hold = append(hold, l, u)
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found only %d of %d free loopback ports", len(ports), n)
	}
	return ports, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// cliPath is how the user can call exe from the current directory: a
// relative path below it (bin/tenure after make demo), else exe itself.
func cliPath(exe string) string {
	wd, err := os.Getwd()
	if err != nil || exe == "" {
		return "tenure"
	}
	if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
		if !strings.ContainsRune(rel, filepath.Separator) {
			rel = "." + string(filepath.Separator) + rel
		}
		return rel
	}
	return exe
}
