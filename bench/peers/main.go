// Command peers measures etcd's leader election failover the way `tenure
// bench failover` measures tenure's, so the two can be compared from one run
// on one machine.
//
// It starts a 3-member etcd cluster embedded in this process (loopback, data
// in a temp dir, fsync on), then repeatedly runs a holder — this binary
// re-executed as a child process — that wins a concurrency.Election with a
// session of the given TTL, and a waiting candidate in this process. In crash
// mode the holder is killed -9 at a random phase of its keepalive and the time
// from the kill to the candidate's Campaign returning (the candidate acting)
// is measured; in resign mode the holder resigns and the gap from the holder
// stopping to the candidate acting is measured. A run where the candidate
// acted before the holder stopped counts as an overlap.
//
// It lives in its own module so that the tenure library does not depend on
// etcd.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/benchkit"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == holderCommand {
		err = runHolder(ctx, os.Args[2:], os.Stdin, os.Stdout)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "peers:") {
			msg = "peers: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

// options are the parsed command-line flags.
type options struct {
	ttl    time.Duration
	runs   int
	mode   string
	tuned  bool
	json   bool
	seed   uint64
	dir    string
	timing raftTimings
	// puts mode
	duration  time.Duration
	proposers []int
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: peers [flags]\n\nMeasures etcd (embedded, 3 members, loopback) election failover.\n\nflags:")
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.ttl, "ttl", 2*time.Second, "election session (lease) TTL; whole seconds")
	fs.IntVar(&o.runs, "runs", 20, "number of failovers to measure")
	fs.StringVar(&o.mode, "mode", "crash", "crash (kill -9 the holder), resign (graceful), or puts (Put throughput)")
	fs.BoolVar(&o.tuned, "tuned", false, "raft heartbeat 50 ms / election 500 ms instead of etcd's 100 ms / 1000 ms")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for the kill phases (0: random)")
	fs.StringVar(&o.dir, "dir", "", "data dir parent (default: a temp dir, removed afterwards)")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "puts mode: measured time per proposer count")
	list := fs.String("proposers", "1,16,64,256", "puts mode: comma-separated concurrent writer counts")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("peers: unexpected arguments %q", fs.Args())
	}
	switch o.mode {
	case "crash", "resign", "puts":
	default:
		return o, fmt.Errorf("peers: -mode %q: want crash, resign or puts", o.mode)
	}
	if o.ttl < time.Second || o.ttl%time.Second != 0 {
		return o, fmt.Errorf("peers: -ttl %v: etcd sessions take whole seconds ≥ 1s", o.ttl)
	}
	if o.runs < 1 || o.runs > 100_000 {
		return o, fmt.Errorf("peers: -runs %d: want 1..100000", o.runs)
	}
	if o.duration <= 0 {
		return o, fmt.Errorf("peers: -duration %v must be positive", o.duration)
	}
	for _, s := range strings.Split(*list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100_000 {
			return o, fmt.Errorf("peers: bad -proposers entry %q", s)
		}
		o.proposers = append(o.proposers, n)
	}
	o.timing = defaultTimings
	if o.tuned {
		o.timing = tunedTimings
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	return o, nil
}

// summary is the JSON line the benchmark prints; its head is the one
// `tenure bench failover --json` prints too.
type summary struct {
	benchkit.FailoverSummary
	TTLMs        int64     `json:"ttl_ms"`
	GrantedTTLMs int64     `json:"granted_ttl_ms"`
	TickMs       uint      `json:"heartbeat_ms"`
	ElectionMs   uint      `json:"election_ms"`
	Seed         uint64    `json:"seed"`
	SamplesMs    []float64 `json:"samples_ms"`
}

// putsRow is one line of puts mode.
type putsRow struct {
	Mode       string  `json:"mode"`
	Profile    string  `json:"profile"`
	Proposers  int     `json:"proposers"`
	Puts       int64   `json:"puts"`
	Seconds    float64 `json:"seconds"`
	PutsPerSec float64 `json:"puts_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	// Failed counts puts that returned an error (such as "etcdserver:
	// request timed out" when overloaded); they are not in puts.
	Failed int64 `json:"failed"`
}

func profileName(o options) string {
	p := fmt.Sprintf("etcd-ttl-%ds", int(o.ttl/time.Second))
	if o.tuned {
		p += "-tuned"
	}
	return p
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if min := o.timing.minLeaseTTL(); o.mode != "puts" && o.ttl < min {
		fmt.Fprintf(stderr, "peers: note: etcd with heartbeat %d ms / election %d ms grants at least %v; -ttl %v will be raised (try -tuned)\n",
			o.timing.TickMs, o.timing.ElectionMs, min, o.ttl)
	}
	parent, cleanup, err := benchkit.WorkDir(o.dir, "tenure-bench-peers-")
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stderr, "starting 3 etcd members on loopback (heartbeat %d ms, election %d ms, data in %s)\n",
		o.timing.TickMs, o.timing.ElectionMs, parent)
	c, err := startEtcd(ctx, parent, o.timing)
	if err != nil {
		return err
	}
	defer c.close()
	cli, err := newClient(c.endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	if o.mode == "puts" {
		return runPuts(ctx, o, cli, stdout)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x7e4e))
	s := summary{
		FailoverSummary: benchkit.FailoverSummary{Mode: o.mode, Profile: profileName(o), Runs: o.runs},
		TTLMs:           o.ttl.Milliseconds(), TickMs: o.timing.TickMs, ElectionMs: o.timing.ElectionMs, Seed: o.seed,
	}
	fmt.Fprintf(stderr, "%s: %d runs, mode %s, seed %d\n", s.Profile, o.runs, o.mode, o.seed)
	for i := range o.runs {
		r, err := oneRun(ctx, runSpec{
			self: self, endpoints: c.endpoints, ttl: o.ttl, mode: o.mode,
			prefix: fmt.Sprintf("/tenure-bench/election-%d", i),
			phase:  time.Duration(rng.Int64N(int64(o.ttl))),
		}, cli)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		s.GrantedTTLMs = r.grantedTTL.Milliseconds()
		ms := float64(r.latency.Microseconds()) / 1000
		s.SamplesMs = append(s.SamplesMs, ms)
		note := ""
		if r.latency < 0 {
			s.Overlaps++
			note = "  OVERLAP: candidate acted before the holder stopped"
		}
		fmt.Fprintf(stderr, "run %3d/%d  phase %6.0f ms  %s → candidate acting %8.1f ms%s\n",
			i+1, o.runs, float64(r.phase.Microseconds())/1000, killWord(o.mode), ms, note)
	}
	sorted := slices.Clone(s.SamplesMs)
	slices.Sort(sorted)
	s.MinMs, s.MaxMs = sorted[0], sorted[len(sorted)-1]
	s.P50Ms, s.P99Ms = benchkit.NearestRank(sorted, 0.50), benchkit.NearestRank(sorted, 0.99)
	if o.json {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "%s (granted TTL %d ms), %s, %d runs: min %.1f  p50 %.1f  p99 %.1f  max %.1f ms, overlaps %d\n",
		s.Profile, s.GrantedTTLMs, s.Mode, s.Runs, s.MinMs, s.P50Ms, s.P99Ms, s.MaxMs, s.Overlaps)
	return nil
}

func killWord(mode string) string {
	if mode == "resign" {
		return "resign"
	}
	return "kill -9"
}

type runSpec struct {
	self      string
	endpoints []string
	ttl       time.Duration
	mode      string
	prefix    string
	phase     time.Duration // how long after the holder wins it is killed or resigns
}

type runResult struct {
	phase      time.Duration
	latency    time.Duration // negative: the candidate acted first (overlap)
	grantedTTL time.Duration
}

// oneRun starts a holder, lines up a candidate behind it, stops the holder
// (kill -9 or resign) after spec.phase and measures until the candidate acts.
func oneRun(ctx context.Context, spec runSpec, cli *clientv3.Client) (runResult, error) {
	res := runResult{phase: spec.phase}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+10*spec.ttl)
	defer cancel()
	cmd := exec.CommandContext(ctx, spec.self, holderCommand,
		"-endpoints", strings.Join(spec.endpoints, ","),
		"-ttl", strconv.Itoa(int(spec.ttl/time.Second)),
		"-prefix", spec.prefix)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, err
	}
	exited := false
	defer func() {
		stdin.Close()
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdoutPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if _, err := expectLine(ctx, lines, lineLeader); err != nil {
		return res, fmt.Errorf("holder: %w", err)
	}
	// The holder's granted TTL, as the server raised it.
	if kv, err := cli.Get(ctx, spec.prefix, clientv3.WithPrefix()); err == nil && len(kv.Kvs) == 1 {
		if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Kvs[0].Lease)); err == nil {
			res.grantedTTL = time.Duration(ttl.GrantedTTL) * time.Second
		}
	}

	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(spec.ttl/time.Second)))
	if err != nil {
		return res, err
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, spec.prefix)
	acted := make(chan time.Time, 1)
	campaignErr := make(chan error, 1)
	go func() {
		if err := el.Campaign(ctx, "candidate"); err != nil {
			campaignErr <- err
			return
		}
		acted <- time.Now()
	}()
	// Wait until the candidate's key is in place behind the holder's.
	for {
		r, err := cli.Get(ctx, spec.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return res, err
		}
		if r.Count >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The holder has held the lease for a moment already; the phase is
	// uniform over one TTL, which spans three keepalive periods.
	select {
	case <-time.After(spec.phase):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	var stopped time.Time
	switch spec.mode {
	case "crash":
		stopped = time.Now()
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return res, fmt.Errorf("kill holder: %w", err)
		}
		cmd.Wait()
		exited = true
	case "resign":
		if _, err := io.WriteString(stdin, lineResign+"\n"); err != nil {
			return res, err
		}
		l, err := expectLine(ctx, lines, lineStopped)
		if err != nil {
			return res, fmt.Errorf("holder: %w", err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(l, lineStopped)), 10, 64)
		if err != nil {
			return res, fmt.Errorf("holder: bad line %q", l)
		}
		// Wall clock across processes on one machine; the candidate's
		// time is compared on the wall clock too (see below).
		stopped = time.Unix(0, ns)
	}
	select {
	case at := <-acted:
		if spec.mode == "resign" {
			at = at.Round(0) // strip the monotonic reading: compare wall clocks
		}
		res.latency = at.Sub(stopped)
	case err := <-campaignErr:
		return res, fmt.Errorf("candidate campaign: %w", err)
	case <-ctx.Done():
		return res, fmt.Errorf("candidate never acted: %w", ctx.Err())
	}
	if spec.mode == "resign" {
		if _, err := expectLine(ctx, lines, lineResigned); err != nil {
			return res, fmt.Errorf("holder: %w", err)
		}
		cmd.Wait()
		exited = true
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := el.Resign(rctx); err != nil {
		return res, fmt.Errorf("candidate resign: %w", err)
	}
	return res, nil
}

// expectLine waits for the holder's next line and checks its first word.
func expectLine(ctx context.Context, lines <-chan string, want string) (string, error) {
	select {
	case l, ok := <-lines:
		if !ok {
			return "", fmt.Errorf("exited before printing %q", want)
		}
		if l != want && !strings.HasPrefix(l, want+" ") {
			return "", fmt.Errorf("printed %q, want %q", l, want)
		}
		return l, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for %q: %w", want, ctx.Err())
	}
}
