package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDockerChaos runs a 5-node cluster as containers built FROM scratch
// around the static binary, each on two private Docker networks: "cluster"
// carries gossip and Raft, "witness" carries the demo workload's ticks to a
// witness in this test and the test's API calls. It then kills (SIGKILL),
// freezes (docker pause, longer than the lease), partitions (disconnects
// from the cluster network) and gracefully restarts the acting owner of a
// shard in turn, and checks after each fault that the shard has a new
// acting owner and, over the whole run, that the witness saw no two
// containers act on one shard at once and no epoch go back.
//
// It needs a working Docker engine (`docker info`) and runs only when
// TENURE_DOCKER_TESTS=1 (make test-docker, and .ci/run, set it).
func TestDockerChaos(t *testing.T) {
	if os.Getenv("TENURE_DOCKER_TESTS") != "1" {
		t.Skip("set TENURE_DOCKER_TESTS=1 to run the Docker chaos test (make test-docker)")
	}
	if testing.Short() {
		t.Skip("Docker chaos test: skipped under -short")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("TENURE_DOCKER_TESTS=1 but no Docker engine answers: %v\n%s", err, out)
	}
	const (
		nodes      = 5
		partitions = 32
		lease      = time.Second // the fast profile
	)
	// TENURE_DOCKER_KILLS=N runs N owner kills, N leader kills and N
	// leader pauses instead of the fault tour; TENURE_DOCKER_LOG=debug runs the agents at debug
	// level and prints the survivors' log lines of each failover;
	// TENURE_DOCKER_BIN names a static binary to run instead of building
	// this tree's (to compare commits).
	kills, _ := strconv.Atoi(os.Getenv("TENURE_DOCKER_KILLS"))
	logLevel := cmp.Or(os.Getenv("TENURE_DOCKER_LOG"), "info")
	dk := newDockerEnv(t)
	image := dk.buildImage()
	seed := rand.Uint64()
	t.Logf("seed %d (fault targets and waits; not a replay of the containers' scheduling)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	clusterNet, clusterPrefix := dk.network("cluster")
	witnessNet, witnessGW := dk.networkGateway("witness")

	// The witness listens on every host address; containers reach it at
	// the witness network's gateway.
	wit := newWitnessChecker()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: wit, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	witnessURL := fmt.Sprintf("http://%s:%d/", witnessGW, ln.Addr().(*net.TCPAddr).Port)

	ids := make([]string, nodes)
	clusterIP := map[string]string{}
	for i := range nodes {
		ids[i] = fmt.Sprintf("n%d", i+1)
		clusterIP[ids[i]] = fmt.Sprintf("%s.%d", clusterPrefix, 10+i)
	}
	seeds := strings.Join([]string{clusterIP["n1"] + ":7946", clusterIP["n2"] + ":7946", clusterIP["n3"] + ":7946"}, ",")
	// The cluster runs as users should: mutual TLS on the Raft port
	// (certificates from `tenure tls init`, copied into each container)
	// and a gossip key (`tenure keygen`).
	tlsDir := filepath.Join(t.TempDir(), "tls")
	var keyOut bytes.Buffer
	quiet := &Main{Stdout: &keyOut, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	if err := quiet.Run(context.Background(), []string{"tls", "init", "--dir", tlsDir, "--nodes", strings.Join(ids, ",")}); err != nil {
		t.Fatalf("tls init: %v", err)
	}
	keyOut.Reset()
	if err := quiet.Run(context.Background(), []string{"keygen"}); err != nil {
		t.Fatalf("keygen: %v", err)
	}
	gossipKey := strings.TrimSpace(keyOut.String())
	apiAddr := map[string]string{}
	for _, id := range ids {
		name := dk.name(id)
		// The voter/member split users deploy: n1–n3 vote and keep their
		// data dirs; n4 and n5 are disk-less members (no data dir, a new
		// incarnation from the control group at every start).
		role := []string{"--voter", "always", "--data-dir", "/data"}
		if !slices.Contains([]string{"n1", "n2", "n3"}, id) {
			role = []string{"--voter", "never", "--diskless"}
		}
		args := append([]string{"create", "--name", name, "--hostname", id, "--network", clusterNet, "--ip", clusterIP[id],
			"--stop-timeout", "30", image, "agent"}, role...)
		dk.run(append(args,
			"--node-id", id, "--profile", "fast", "--partitions", fmt.Sprint(partitions),
			"--bootstrap-expect", "3", "--seeds", seeds,
			"--gossip-addr", "0.0.0.0:7946", "--gossip-advertise", clusterIP[id]+":7946",
			"--raft-addr", "0.0.0.0:7947", "--raft-advertise", clusterIP[id]+":7947",
			"--tls-ca", "/tls/ca.pem", "--tls-cert", "/tls/"+id+".pem", "--tls-key", "/tls/"+id+"-key.pem",
			"--encrypt", gossipKey,
			"--http-addr", "0.0.0.0:7948", "--http-insecure", // the API is reachable on the private networks only
			"--witness", witnessURL, "--tick", "10ms", "--log-format", "json", "--log-level", logLevel)...)
		nodeTLS := filepath.Join(tlsDir, "node-"+id)
		if err := os.Mkdir(nodeTLS, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.pem", id + ".pem", id + "-key.pem"} {
			b, err := os.ReadFile(filepath.Join(tlsDir, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(nodeTLS, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		dk.run("cp", nodeTLS+"/.", name+":/tls") // only its own key
		dk.run("network", "connect", witnessNet, name)
		dk.run("start", name)
		apiAddr[id] = dk.ipOn(name, witnessNet) + ":7948"
	}
	live := map[string]bool{}
	for _, id := range ids {
		live[id] = true
	}
	dc := &demoCluster{}
	for _, id := range ids {
		dc.agents = append(dc.agents, &demoAgent{id: id, http: apiAddr[id]})
	}
	start := time.Now()
	owners := waitOneActingOwner(t, dc, live, partitions, "", 120*time.Second)
	t.Logf("5 containers: every shard has one acting owner after %v", time.Since(start).Round(time.Millisecond))
	waitMembersOnStream(t, apiAddr, []string{"n4", "n5"}, 60*time.Second)

	// failover applies one fault to the acting owner of a random shard and
	// waits for another node to act on it; heal undoes the fault and waits
	// until the healed node acts on shards again.
	// randomOwner picks a random shard and its acting owner.
	randomOwner := func() (uint32, string) {
		shard := uint32(rng.IntN(partitions))
		return shard, owners[shard]
	}
	// leaderShard picks the control group's leader and a shard it acts on.
	leaderShard := func() (uint32, string) {
		t.Helper()
		// The leader may act on no shard for a moment (a node that just
		// came back takes its ring place): wait for one.
		var leader string
		var mine []uint32
		waitFor(t, 30*time.Second, "a control-group leader acting on a shard", func() bool {
			st, err := getJSON[apitypes.Status](apiAddr["n1"], "/v1/status")
			leader, mine = st.ControlLeader, nil
			if err != nil || leader == "" {
				return false
			}
			o, err := actingOwners(dc, live)
			if err != nil {
				return false
			}
			for s, ids := range o {
				if len(ids) == 1 && ids[0] == leader {
					mine = append(mine, s)
				}
			}
			return len(mine) > 0
		})
		slices.Sort(mine)
		return mine[rng.IntN(len(mine))], leader
	}
	failover := func(what string, pick func() (uint32, string), fault, heal func(name string)) time.Duration {
		t.Helper()
		shard, victim := pick()
		faultAt := time.Now()
		fault(dk.name(victim))
		delete(live, victim)
		// The liveness bound (L1), generous for the fast profile's 1 s
		// lease: expected is 1–3 s. A leader killed without RSTs once took
		// 38 s here, which a 60 s bound let pass.
		const bound = 15 * time.Second
		var next string
		deadline := time.Now().Add(bound)
		for next == "" {
			if time.Now().After(deadline) {
				t.Fatalf("seed %d: %s %s: shard %d has no new acting owner after %v", seed, what, victim, shard, bound)
			}
			if o, err := actingOwners(dc, live); err == nil && len(o[shard]) == 1 {
				next = o[shard][0]
				break
			}
			<-time.After(20 * time.Millisecond)
		}
		moved := time.Since(faultAt)
		if first := firstTickAfter(wit, shard, victim, faultAt); !first.IsZero() {
			moved = first.Sub(faultAt)
		}
		t.Logf("%s %s: shard %d acted on by %s after %v", what, victim, shard, next, moved.Round(time.Millisecond))
		if logLevel == "debug" {
			dk.dumpLogs(t, ids, victim, faultAt, faultAt.Add(moved+200*time.Millisecond))
		}
		heal(dk.name(victim))
		live[victim] = true
		waitFor(t, 120*time.Second, victim+" to act on shards again", func() bool {
			o, err := actingOwners(dc, live)
			if err != nil {
				return false
			}
			for _, ids := range o {
				if len(ids) == 1 && ids[0] == victim {
					return true
				}
			}
			return false
		})
		owners = waitOneActingOwner(t, dc, live, partitions, "", 120*time.Second)
		return moved
	}

	kill := func(name string) { dk.run("kill", "--signal", "KILL", name) }
	restartC := func(name string) { dk.run("start", name) }
	if kills > 0 {
		// Kills only, alternating (docs/benchmarks.md, failover between
		// containers): an owner kill that is not the leader, then a leader kill.
		var owner, leader, paused []time.Duration
		var pausedAt time.Time
		pause := func(name string) { dk.run("pause", name); pausedAt = time.Now() }
		unpause := func(name string) {
			// The fault's length, not a wait for a condition (as below).
			<-time.After(time.Until(pausedAt.Add(5 * lease)))
			dk.run("unpause", name)
		}
		for range kills {
			_, l := leaderShard()
			notLeader := func() (uint32, string) {
				for {
					if s, o := randomOwner(); o != l {
						return s, o
					}
				}
			}
			owner = append(owner, failover("docker kill (SIGKILL) of an owner (not the leader)", notLeader, kill, restartC))
			leader = append(leader, failover("docker kill (SIGKILL) of the control-group leader", leaderShard, kill, restartC))
			paused = append(paused, failover("docker pause of the control-group leader (5 lease periods)", leaderShard, pause, unpause))
		}
		op, lp := medianDuration(owner), medianDuration(leader)
		t.Logf("kills: owner %v p50 %v; leader %v p50 %v; leader/owner %.2f", owner, op, leader, lp, float64(lp)/float64(op))
		t.Logf("leader paused: %v p50 %v", paused, medianDuration(paused))
	} else {
		failover("docker kill (SIGKILL) of an owner", randomOwner, kill, restartC)
		failover("docker kill (SIGKILL) of the control-group leader", leaderShard, kill, restartC)
	}
	if kills == 0 {
		var pausedAt time.Time
		failover("docker pause (5 lease periods)", randomOwner, func(name string) { dk.run("pause", name); pausedAt = time.Now() },
			func(name string) {
				// The fault's length, not a wait for a condition: the frozen
				// process must wake long after its lease ended.
				<-time.After(time.Until(pausedAt.Add(5 * lease)))
				dk.run("unpause", name)
			})
		failover("partition (cluster network cut)", randomOwner, func(name string) { dk.run("network", "disconnect", clusterNet, name) },
			func(name string) {
				id := strings.TrimPrefix(name, dk.prefix)
				dk.run("network", "connect", "--ip", clusterIP[id], clusterNet, name)
			})
		failover("docker restart (SIGTERM: drain, leave, start)", randomOwner, func(name string) { dk.run("restart", "--time", "30", name) },
			func(string) {})
	}

	// Let the witness see the final placement, then judge the whole run.
	seen := wit.check(1).Ticks
	waitFor(t, 30*time.Second, "more witness ticks", func() bool { return wit.check(1).Ticks > seen+partitions*3 })
	r := wit.check(20)
	t.Logf("witness: %d ticks on %d shards, %d violations", r.Ticks, r.Shards, len(r.Violations))
	if r.Shards != partitions {
		t.Errorf("witness saw %d shards, want %d", r.Shards, partitions)
	}
	for _, v := range r.Violations {
		t.Errorf("seed %d: %s", seed, v)
	}
	if t.Failed() {
		for _, id := range ids {
			t.Logf("--- %s log (tail):\n%s", id, dk.logs(dk.name(id), 30))
		}
	}
}

// dockerEnv names and cleans up one test's images, networks and
// containers.
type dockerEnv struct {
	t      *testing.T
	prefix string
}

func newDockerEnv(t *testing.T) *dockerEnv {
	d := &dockerEnv{t: t, prefix: fmt.Sprintf("tenure-test-%d-", os.Getpid())}
	t.Cleanup(d.cleanup)
	return d
}

func (d *dockerEnv) name(id string) string { return d.prefix + id }

// run runs one docker command and fails the test on error.
func (d *dockerEnv) run(args ...string) string {
	d.t.Helper()
	out, err := d.try(args...)
	if err != nil {
		d.t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (d *dockerEnv) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildImage builds the static binary and the FROM-scratch image of the
// repository's Dockerfile around it.
func (d *dockerEnv) buildImage() string {
	d.t.Helper()
	dir := d.t.TempDir()
	gobin, err := exec.LookPath("go")
	if err != nil {
		d.t.Fatalf("no go binary on PATH: %v", err)
	}
	if bin := os.Getenv("TENURE_DOCKER_BIN"); bin != "" {
		// A static binary built elsewhere (another commit, to compare).
		b, err := os.ReadFile(bin)
		if err != nil {
			d.t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
			d.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bin", "tenure"), b, 0o755); err != nil {
			d.t.Fatal(err)
		}
	} else {
		cmd := exec.Command(gobin, "build", "-trimpath", "-o", filepath.Join(dir, "bin", "tenure"), ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			d.t.Fatalf("static build: %v\n%s", err, out)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644); err != nil {
		d.t.Fatal(err)
	}
	image := strings.TrimSuffix(d.prefix, "-") + ":test"
	d.run("build", "-q", "-t", image, dir)
	return image
}

// network creates a bridge network with a fixed /24 (so a reconnected
// container gets its address back) and returns its name and the /24's
// first three octets.
func (d *dockerEnv) network(role string) (name, prefix string) {
	d.t.Helper()
	name = d.prefix + role
	for range 20 {
		prefix = fmt.Sprintf("10.%d.%d", 100+rand.IntN(100), rand.IntN(250))
		if _, err := d.try("network", "create", "--driver", "bridge", "--subnet", prefix+".0/24", name); err == nil {
			return name, prefix
		}
	}
	d.t.Fatalf("could not create network %s with a free subnet", name)
	return "", ""
}

// networkGateway creates a bridge network and returns its name and the
// host's address on it.
func (d *dockerEnv) networkGateway(role string) (name, gateway string) {
	d.t.Helper()
	name, prefix := d.network(role)
	gw := d.run("network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}", name)
	if gw == "" {
		gw = prefix + ".1"
	}
	return name, gw
}

// ipOn returns a container's address on a network.
func (d *dockerEnv) ipOn(container, network string) string {
	d.t.Helper()
	ip := d.run("inspect", "-f", fmt.Sprintf("{{(index .NetworkSettings.Networks %q).IPAddress}}", network), container)
	if net.ParseIP(ip) == nil {
		d.t.Fatalf("container %s has no address on %s: %q", container, network, ip)
	}
	return ip
}

func (d *dockerEnv) logs(container string, lines int) string {
	out, err := exec.Command("docker", "logs", "--tail", fmt.Sprint(lines), container).CombinedOutput()
	if err != nil {
		return err.Error()
	}
	return string(out)
}

// cleanup removes every container, network and image the test created.
func (d *dockerEnv) cleanup() {
	var errs []error
	if out, err := d.try("ps", "-aq", "--filter", "name="+d.prefix); err == nil && out != "" {
		if _, err := d.try(append([]string{"rm", "-f", "-v"}, strings.Fields(out)...)...); err != nil {
			errs = append(errs, err)
		}
	}
	if out, err := d.try("network", "ls", "-q", "--filter", "name="+d.prefix); err == nil && out != "" {
		if _, err := d.try(append([]string{"network", "rm"}, strings.Fields(out)...)...); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := d.try("image", "rm", "-f", strings.TrimSuffix(d.prefix, "-")+":test"); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		d.t.Logf("docker cleanup: %v", err)
	}
}

// dumpLogs prints the log lines the containers (the victim's excluded)
// wrote between from and to, in time order: the timeline of a failover.
func (d *dockerEnv) dumpLogs(t *testing.T, ids []string, victim string, from, to time.Time) {
	t.Helper()
	var lines []string
	for _, id := range ids {
		if id == victim {
			continue
		}
		out, err := exec.Command("docker", "logs", "--timestamps", "--since", from.Add(-100*time.Millisecond).Format(time.RFC3339Nano),
			"--until", to.Format(time.RFC3339Nano), d.name(id)).CombinedOutput()
		if err != nil {
			t.Logf("logs of %s: %v", id, err)
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			ts, rest, ok := strings.Cut(l, " ")
			if !ok {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				continue
			}
			lines = append(lines, fmt.Sprintf("%+8dms %s %s", at.Sub(from).Milliseconds(), id, rest))
		}
	}
	slices.SortStableFunc(lines, func(a, b string) int {
		x, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(strings.TrimSpace(a), "ms", 2)[0]))
		y, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(strings.TrimSpace(b), "ms", 2)[0]))
		return cmp.Compare(x, y)
	})
	t.Logf("timeline (ms after the fault):\n%s", strings.Join(lines, "\n"))
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// waitMembersOnStream waits until each member reports (GET /v1/status)
// that it follows the committed-state stream (cluster version 5) and has
// received entries or a snapshot from it.
func waitMembersOnStream(t *testing.T, apiAddr map[string]string, members []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, id := range members {
		for {
			st, err := getJSON[apitypes.Status](apiAddr[id], "/v1/status")
			if err == nil && st.Stream != nil && st.Stream.Following && st.Stream.Reconnects+st.Stream.Snapshots+st.Stream.BytesReceived > 0 {
				t.Logf("%s follows the committed-state stream from %s: %d bytes received, %d snapshots, %d ms behind",
					id, st.Stream.Server, st.Stream.BytesReceived, st.Stream.Snapshots, st.Stream.LagMS)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not on the committed-state stream after %v: %+v (err %v)", id, d, st.Stream, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
