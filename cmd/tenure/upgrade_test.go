package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cmd/tenure/internal/bench"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/node"
)

// TestRollingUpgrade is `make upgrade-test` (docs/upgrades.md): five agents
// (three voters) of the release recorded in .ci/previous-release, under a
// keyed-job load, are replaced one at a time by the current tree the way
// docs/upgrades.md tells operators to — drain, SIGTERM, start the new
// binary on the same data dir; members first, then voters, the leader last,
// in a seeded random order within each group — then a member and a voter
// go back to the previous binary and forward again, one at a time (the
// downgrade window that --manual-finalize keeps open), and the cluster is
// finalized; then the previous binary, started on a data dir that ran at
// the finalized version, must be refused with a clear error; then every
// node is drained and restarted once more on the current tree, now at the
// finalized version (what the next release's upgrade looks like). It
// checks: no two nodes ever acted on one shard at once (the witness),
// every shard acting after each step, every acknowledged job done exactly
// once with its creation reported once, the voter set unchanged, no shard
// started on the old owner's word before finalizing while the cluster
// runs below version 6 (a mixed cluster then hands over on the commit), and, when the new binary speaks a newer
// cluster version (it must: ledger.MaxClusterVersion above the previous
// release's), that finalizing raises it to ledger.MaxClusterVersion and
// refuses the previous binary, and — from version 6 — that the restarts
// after it hand shards over on words. It prints each step's worst acting
// gap, and the worst per phase: the steps at the previous version and the
// restarts at the new one.
func TestRollingUpgrade(t *testing.T) {
	if os.Getenv("TENURE_UPGRADE_TESTS") == "" {
		t.Skip("set TENURE_UPGRADE_TESTS=1 (make upgrade-test)")
	}
	const partitions = 32
	seed := rand.Uint64()
	if s := os.Getenv("TENURE_UPGRADE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_UPGRADE_SEED %q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay: TENURE_UPGRADE_SEED=%d make upgrade-test)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	newBin := tenureBinary(t)
	oldBin, oldRev := buildPreviousRelease(t)
	t.Logf("previous release %s → current tree", oldRev)

	dir := t.TempDir()
	// The workload looks at its shards every millisecond and reports the
	// first and last sample of each acting stretch (--tick-sample), so a
	// step's gap is the handoff's to within 1 ms, not up to a 5 ms tick on
	// each side (as tenure bench failover --mode drain measures it).
	dc, err := startDemo(oldBin, dir, 5, partitions, "fast", "--manual-finalize", "--tick", "5ms", "--tick-sample", "1ms")
	if dc != nil {
		t.Cleanup(func() {
			dc.stop(testWriter{t})
			if t.Failed() {
				for _, a := range dc.agents {
					t.Logf("--- %s log (tail):\n%s", a.id, tail(a.logPath, 30))
				}
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.waitReady(context.Background(), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, a := range dc.agents {
		live[a.id] = true
	}
	waitOneActingOwner(t, dc, live, partitions, "", 60*time.Second)
	st0 := mustStatus(t, dc, live)
	voters0 := slices.Clone(st0.Voters)
	sort.Strings(voters0)
	before := upgradeStatusOf(t, dc.agents[0])
	t.Logf("start: voters %v, leader %s, cluster version %d, previous binary speaks %d..%d",
		voters0, st0.ControlLeader, before.Active, before.BinaryMin, before.BinaryMax)

	load := startJobLoad(t, dc, rng.Uint64())

	// The order: members, then voters, the leader last; shuffled within.
	var members, voters []*demoAgent
	for _, a := range dc.agents {
		switch {
		case a.id == st0.ControlLeader:
		case slices.Contains(voters0, a.id):
			voters = append(voters, a)
		default:
			members = append(members, a)
		}
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	rng.Shuffle(len(voters), func(i, j int) { voters[i], voters[j] = voters[j], voters[i] })
	order := append(append(members, voters...), agentByID(dc, st0.ControlLeader))

	type step struct {
		what, id         string
		gap, moveGap     tickGap
		leaderChanges    int
		took             time.Duration
		leaderAfterwards string
		version          uint32 // the cluster's active version during the step
		words            int    // shards started on the old owner's word (tenure_shard_starts_total{on="word"})
	}
	var steps []step
	replace := func(what string, a *demoAgent, bin string) {
		t.Helper()
		t0 := time.Now()
		leaderBefore := mustStatus(t, dc, live).ControlLeader
		version := upgradeStatusOf(t, agentByID(dc, leaderBefore)).Active
		wordsBefore := wordStarts(t, dc, live)
		delete(wordsBefore, a.id) // it restarts: its count starts from 0
		drainAgent(t, a)
		stopAgent(t, a)
		live[a.id] = false
		if err := dc.startAgent(a, bin); err != nil {
			t.Fatal(err)
		}
		live[a.id] = true
		waitAgentReady(t, a, 60*time.Second)
		waitOneActingOwner(t, dc, live, partitions, "", 60*time.Second)
		st := mustStatus(t, dc, live)
		changes := 0
		if st.ControlLeader != leaderBefore {
			changes = 1
		}
		gap, moveGap := maxTickGaps(dc.witness, partitions, t0, time.Now())
		words := 0
		for id, n := range wordStarts(t, dc, live) {
			words += n - min(n, wordsBefore[id])
		}
		steps = append(steps, step{what: what, id: a.id, gap: gap, moveGap: moveGap,
			leaderChanges: changes, took: time.Since(t0), leaderAfterwards: st.ControlLeader,
			version: version, words: words})
	}
	for _, a := range order {
		replace("upgrade", a, newBin)
	}
	// The downgrade window: a member and a voter back to the previous
	// binary and forward again, one at a time, before finalizing. The
	// voter keeps its Raft state across both binaries.
	back := members[0]
	replace("downgrade", back, oldBin)
	replace("upgrade again", back, newBin)
	backVoter := voters[0]
	replace("downgrade voter", backVoter, oldBin)
	replace("upgrade voter again", backVoter, newBin)

	after := upgradeStatusOf(t, dc.agents[0])
	if after.Active != before.Active {
		t.Fatalf("the cluster version moved from %d to %d before finalizing (--manual-finalize)", before.Active, after.Active)
	}
	if after.BinaryMax != ledger.MaxClusterVersion {
		t.Fatalf("the upgraded agents speak up to %d, this tree %d", after.BinaryMax, ledger.MaxClusterVersion)
	}
	for _, s := range steps {
		// Below version 6 a mixed cluster hands over on the commit; a
		// previous release that speaks 6 itself hands over on words.
		if s.words != 0 && s.version < ledger.VersionHandoffWords {
			t.Errorf("%s %s: %d shards started on a word in a cluster at version %d (mixed with the previous release)", s.what, s.id, s.words, s.version)
		}
	}
	preSteps := len(steps)
	code, body := postJSON(t, dc.agents[0], "/v1/upgrade/finalize")
	switch {
	case after.BinaryMax > before.BinaryMax:
		if code != http.StatusOK {
			t.Fatalf("finalize: %d %s", code, body)
		}
		fin := upgradeStatusOf(t, dc.agents[0])
		if fin.Active != after.BinaryMax {
			t.Fatalf("finalized to %d, want %d", fin.Active, after.BinaryMax)
		}
		t.Logf("finalized: cluster version %d → %d", before.Active, fin.Active)
		checkPreviousRefused(t, dc, oldBin, dir)
		checkPreviousRefusedOnDataDir(t, dc, back, oldBin, newBin, live, partitions)
	default:
		if code != http.StatusConflict {
			t.Fatalf("finalize with nothing newer: %d %s, want 409", code, body)
		}
		t.Logf("both binaries speak up to version %d: nothing to finalize (%s)", after.BinaryMax, strings.TrimSpace(body))
	}

	// Restart at the new version: every node drained and restarted once
	// more on this tree, members first and the leader last, as the next
	// release's upgrade will do it (from version 6 the drains hand over on
	// the old owner's word).
	stNow := mustStatus(t, dc, live)
	var again []*demoAgent
	for _, group := range [][]*demoAgent{members, voters} {
		for _, a := range group {
			if a.id != stNow.ControlLeader {
				again = append(again, a)
			}
		}
	}
	if a := agentByID(dc, st0.ControlLeader); a.id != stNow.ControlLeader {
		again = append(again, a)
	}
	again = append(again, agentByID(dc, stNow.ControlLeader))
	for _, a := range again {
		// A node restarted just before (the data-dir check) may not own
		// shards again yet: its drain would hand nothing over.
		waitOwns(t, a, 60*time.Second)
		replace("restart at new", a, newBin)
	}
	newWords := 0
	for _, s := range steps[preSteps:] {
		if s.version != ledger.MaxClusterVersion {
			t.Errorf("%s %s: the cluster ran version %d after finalizing, want %d", s.what, s.id, s.version, ledger.MaxClusterVersion)
		}
		newWords += s.words
	}
	if ledger.MaxClusterVersion >= ledger.VersionHandoffWords && newWords == 0 {
		t.Errorf("no shard started on the old owner's word in %d drains at version %d", len(steps)-preSteps, ledger.MaxClusterVersion)
	}

	acked := load.stop()
	load.checkDone(t, dc, live, 90*time.Second)
	st := mustStatus(t, dc, live)
	votersEnd := slices.Clone(st.Voters)
	sort.Strings(votersEnd)
	if !slices.Equal(votersEnd, voters0) {
		t.Errorf("voter set changed across the upgrade: %v → %v", voters0, votersEnd)
	}
	checkDigests(t, dc)
	rep := dc.witness.check(20)
	if len(rep.Violations) > 0 {
		t.Errorf("witness: %d overlaps:\n%s", len(rep.Violations), strings.Join(rep.Violations, "\n"))
	}

	var tb strings.Builder
	fmt.Fprintf(&tb, "%-19s %-4s %7s %8s %8s %14s %-12s %-28s %9s %-28s %5s\n", "step", "node", "version", "max gap", "took", "leader changes", "leader after", "max gap at", "move gap", "at", "words")
	var worstOld, worstNew, moveOld, moveNew time.Duration
	for i, s := range steps {
		fmt.Fprintf(&tb, "%-19s %-4s %7d %8s %8s %14d %-12s %-28s %9s %-28s %5d\n", s.what, s.id, s.version, s.gap.d.Round(time.Millisecond), s.took.Round(100*time.Millisecond),
			s.leaderChanges, s.leaderAfterwards, s.gap, s.moveGap.d.Round(time.Millisecond), s.moveGap, s.words)
		if i < preSteps {
			worstOld, moveOld = max(worstOld, s.gap.d), max(moveOld, s.moveGap.d)
		} else {
			worstNew, moveNew = max(worstNew, s.gap.d), max(moveNew, s.moveGap.d)
		}
	}
	t.Logf("seed %d, %s → current: %d jobs acknowledged, witness %d ticks on %d shards, %d overlaps\n"+
		"worst per-step gap at version %d (upgrade, downgrade window): %v (across a handoff: %v)\n"+
		"worst per-step gap restarting at version %d: %v (across a handoff: %v), %d shards started on a word\n%s",
		seed, oldRev, acked, rep.Ticks, rep.Shards, len(rep.Violations),
		before.Active, worstOld.Round(time.Millisecond), moveOld.Round(time.Millisecond),
		upgradeStatusOf(t, dc.agents[0]).Active, worstNew.Round(time.Millisecond), moveNew.Round(time.Millisecond), newWords, tb.String())
}

// waitOwns waits until a acts on some shard.
func waitOwns(t *testing.T, a *demoAgent, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if st, err := getJSON[apitypes.Status](a.http, "/v1/status"); err == nil && st.Owned > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s owns no shard after %v", a.id, d)
		}
		<-time.After(100 * time.Millisecond)
	}
}

// wordStarts is tenure_shard_starts_total{on="word"} of every live agent
// (0 for one of a release without the series).
func wordStarts(t *testing.T, dc *demoCluster, live map[string]bool) map[string]int {
	t.Helper()
	out := map[string]int{}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, a := range dc.agents {
		if !live[a.id] {
			continue
		}
		resp, err := c.Get("http://" + a.http + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics on %s: %v", a.id, err)
		}
		m, err := bench.ParseLabeledCounter(io.LimitReader(resp.Body, 8<<20), "tenure_shard_starts_total", "on")
		resp.Body.Close()
		if err != nil {
			t.Fatalf("/metrics of %s: %v", a.id, err)
		}
		out[a.id] = m["word"]
	}
	return out
}

// checkDigests asks every agent for a hash of its replicated state right
// after one log index a little ahead of them all: every replica applied
// the same log, so they must agree.
func checkDigests(t *testing.T, dc *demoCluster) {
	t.Helper()
	var at uint64
	for _, a := range dc.agents {
		st, err := getJSON[apitypes.Status](a.http, "/v1/status")
		if err != nil {
			t.Fatalf("status of %s: %v", a.id, err)
		}
		at = max(at, st.AppliedIndex)
	}
	// A little ahead of them all. From cluster version 4 an idle cluster
	// commits nothing (renewals are off the log), so enqueue a job every
	// 20 ms until every digest is in: the entries reach index at.
	at += 5
	stopNudge := make(chan struct{})
	nudged := make(chan struct{})
	go func() {
		defer close(nudged)
		c := &http.Client{Timeout: 5 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-stopNudge:
				return
			case <-time.After(20 * time.Millisecond):
			}
			a := dc.agents[i%len(dc.agents)]
			body := fmt.Sprintf(`{"type":"digest","key":"digest-%d"}`, i)
			if resp, err := c.Post("http://"+a.http+"/v1/jobs", "application/json", strings.NewReader(body)); err == nil {
				resp.Body.Close()
			}
		}
	}()
	defer func() { close(stopNudge); <-nudged }()
	type answer struct {
		Node, Digest string
	}
	got := make([]answer, len(dc.agents))
	var wg sync.WaitGroup
	for i, a := range dc.agents {
		wg.Go(func() {
			c := &http.Client{Timeout: 15 * time.Second} // the agent waits for the index
			resp, err := c.Get(fmt.Sprintf("http://%s/v1/debug/digest?index=%d", a.http, at))
			if err != nil {
				t.Errorf("digest of %s at %d: %v", a.id, at, err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Errorf("digest of %s at %d: %s %s", a.id, at, resp.Status, b)
				return
			}
			if err := json.NewDecoder(resp.Body).Decode(&got[i]); err != nil {
				t.Errorf("digest of %s: %v", a.id, err)
			}
		})
	}
	wg.Wait()
	for _, g := range got[1:] {
		if g.Digest != got[0].Digest {
			t.Errorf("replicas differ at log index %d: %+v", at, got)
			return
		}
	}
	t.Logf("all %d replicas agree at log index %d: state digest %s", len(got), at, got[0].Digest)
}

// buildPreviousRelease builds cmd/tenure at the commit .ci/previous-release
// names, from this repository's history.
func buildPreviousRelease(t *testing.T) (bin, rev string) {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (the upgrade test needs the repository's history)", err)
	}
	top := strings.TrimSpace(string(root))
	raw, err := os.ReadFile(filepath.Join(top, ".ci", "previous-release"))
	if err != nil {
		t.Fatalf("read .ci/previous-release: %v", err)
	}
	rev = ""
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			rev = line
			break
		}
	}
	if rev == "" {
		t.Fatal(".ci/previous-release names no commit")
	}
	src := filepath.Join(t.TempDir(), "previous")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", top, "archive", "--format=tar", rev)
	var tarball bytes.Buffer
	archive.Stdout = &tarball
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s (a shallow clone lacks it: fetch the history)", rev, err, stderr.String())
	}
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v: %s", rev, err, out)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(t.TempDir(), "tenure-previous")
	build := exec.Command(gobin, "build", "-o", bin, "./cmd/tenure")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release %s: %v\n%s", rev, err, out)
	}
	return bin, rev[:min(len(rev), 12)]
}

func agentByID(dc *demoCluster, id string) *demoAgent {
	for _, a := range dc.agents {
		if a.id == id {
			return a
		}
	}
	return nil
}

// mustStatus asks the first live agent that answers.
func mustStatus(t *testing.T, dc *demoCluster, live map[string]bool) apitypes.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, a := range dc.agents {
			if !live[a.id] {
				continue
			}
			if st, err := getJSON[apitypes.Status](a.http, "/v1/status"); err == nil && st.ControlLeader != "" {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no agent reports a control-group leader")
		}
		<-time.After(100 * time.Millisecond)
	}
}

func upgradeStatusOf(t *testing.T, a *demoAgent) node.UpgradeStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		us, err := getJSON[node.UpgradeStatus](a.http, "/v1/upgrade")
		if err == nil {
			return us
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/upgrade on %s: %v", a.id, err)
		}
		<-time.After(100 * time.Millisecond)
	}
}

func postJSON(t *testing.T, a *demoAgent, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Post("http://"+a.http+path, "application/json", nil)
	if err != nil {
		t.Fatalf("POST %s on %s: %v", path, a.id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func drainAgent(t *testing.T, a *demoAgent) {
	t.Helper()
	code, body := postJSON(t, a, "/v1/drain?wait=20s")
	if code != http.StatusOK {
		t.Fatalf("drain %s: %d %s", a.id, code, body)
	}
}

func stopAgent(t *testing.T, a *demoAgent) {
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(40 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Fatalf("%s did not exit within 40s of SIGTERM", a.id)
	}
}

func waitAgentReady(t *testing.T, a *demoAgent, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		select {
		case <-a.exited:
			t.Fatalf("%s exited while starting: %v\n%s", a.id, a.exitErr, tail(a.logPath, 20))
		default:
		}
		if resp, err := e2eClient.Get("http://" + a.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v\n%s", a.id, d, tail(a.logPath, 20))
		}
		<-time.After(100 * time.Millisecond)
	}
}

// tickGap is a stretch within a step during which one shard got no
// witness tick: between before (zero: the step's start) and after.
type tickGap struct {
	d             time.Duration
	shard         uint32
	before, after tick
}

// moved reports whether the shard changed owner or epoch across the gap
// (a handoff), rather than its owner's workload not ticking (a stall).
func (g tickGap) moved() bool {
	return g.before.Node != "" && (g.before.Node != g.after.Node || g.before.Epoch != g.after.Epoch)
}

func (g tickGap) String() string {
	if g.d == 0 {
		return "-"
	}
	from := "step start"
	if g.before.Node != "" {
		from = fmt.Sprintf("%s@%d", g.before.Node, g.before.Epoch)
	}
	return fmt.Sprintf("shard %d %s→%s@%d", g.shard, from, g.after.Node, g.after.Epoch)
}

// maxTickGaps returns the longest time, within [from, to], that some
// shard went without a witness tick (the acting gap of the step), and the
// longest such time across a handoff (owner or epoch changed); the first
// may be a stall of the machine, the second is the protocol's.
func maxTickGaps(w *witnessChecker, partitions int, from, to time.Time) (worst, worstMove tickGap) {
	for s := range partitions {
		prev := tick{UnixNano: from.UnixNano()}
		for _, tk := range w.ticksOf(uint32(s)) {
			if tk.UnixNano < from.UnixNano() {
				continue
			}
			if tk.UnixNano > to.UnixNano() {
				break
			}
			g := tickGap{d: time.Duration(tk.UnixNano - prev.UnixNano), shard: uint32(s), before: prev, after: tk}
			if g.d > worst.d {
				worst = g
			}
			if g.moved() && g.d > worstMove.d {
				worstMove = g
			}
			prev = tk
		}
	}
	return worst, worstMove
}

// checkPreviousRefused starts the previous binary as a new member after
// finalizing: it must exit, refused, without ever becoming ready.
func checkPreviousRefused(t *testing.T, dc *demoCluster, oldBin, dir string) {
	t.Helper()
	quiet := &Main{Stdout: io.Discard, Stderr: io.Discard}
	tlsDir := filepath.Join(dir, "tls")
	if err := quiet.Run(context.Background(), []string{"tls", "cert", "--dir", tlsDir, "--node", "n9"}); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	a := &demoAgent{id: "n9", http: "127.0.0.1:" + strconv.Itoa(ports[2]), logPath: filepath.Join(dir, "n9.log")}
	a.args = []string{"agent", "--node-id", "n9", "--data-dir", filepath.Join(dir, "n9"),
		"--gossip-addr", "127.0.0.1:" + strconv.Itoa(ports[0]), "--raft-addr", "127.0.0.1:" + strconv.Itoa(ports[1]),
		"--http-addr", a.http, "--seeds", dc.agents[0].gossip, "--profile", "fast", "--partitions", "32",
		"--log-format", "json", "--tls-ca", filepath.Join(tlsDir, "ca.pem"), "--tls-cert", filepath.Join(tlsDir, "n9.pem"),
		"--tls-key", filepath.Join(tlsDir, "n9-key.pem")}
	if err := dc.startAgent(a, oldBin); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.exited:
		t.Logf("the previous binary was refused after finalizing: %v; its log:\n%s", a.exitErr, tail(a.logPath, 3))
		if a.exitErr == nil {
			t.Error("the previous binary exited 0 after finalizing")
		}
	case <-time.After(90 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Errorf("the previous binary still runs 90s after finalizing; its log:\n%s", tail(a.logPath, 10))
	}
}

// checkPreviousRefusedOnDataDir stops a (a member running the new binary
// after finalizing) and starts the previous binary on its data dir: it must
// exit non-zero without becoming ready, its log saying the data dir ran at
// a cluster version it cannot speak. Then a runs the new binary again.
func checkPreviousRefusedOnDataDir(t *testing.T, dc *demoCluster, a *demoAgent, oldBin, newBin string, live map[string]bool, partitions int) {
	t.Helper()
	drainAgent(t, a)
	stopAgent(t, a)
	live[a.id] = false
	if err := dc.startAgent(a, oldBin); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.exited:
		log := tail(a.logPath, 5)
		t.Logf("the previous binary on %s's upgraded data dir was refused: %v; its log:\n%s", a.id, a.exitErr, log)
		if a.exitErr == nil {
			t.Errorf("the previous binary exited 0 on %s's upgraded data dir", a.id)
		}
		if !strings.Contains(log, "last run at cluster version") {
			t.Errorf("the previous binary's refusal on %s's data dir does not say why (want \"last run at cluster version\"):\n%s", a.id, log)
		}
	case <-time.After(90 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Fatalf("the previous binary still runs on %s's upgraded data dir 90s after start; its log:\n%s", a.id, tail(a.logPath, 10))
	}
	if err := dc.startAgent(a, newBin); err != nil {
		t.Fatal(err)
	}
	live[a.id] = true
	waitAgentReady(t, a, 60*time.Second)
	waitOneActingOwner(t, dc, live, partitions, "", 60*time.Second)
}

// jobLoad enqueues keyed jobs through random live agents until stopped.
type jobLoad struct {
	mu      sync.Mutex
	ids     map[string]string // key → job id
	created map[string]int    // key → answers that said "created"
	retried int               // completed jobs that needed more than one attempt
	stopCh  chan struct{}
	done    chan struct{}
}

func startJobLoad(t *testing.T, dc *demoCluster, seed uint64) *jobLoad {
	l := &jobLoad{ids: map[string]string{}, created: map[string]int{}, stopCh: make(chan struct{}), done: make(chan struct{})}
	rng := rand.New(rand.NewPCG(seed, 1))
	c := &http.Client{Timeout: 10 * time.Second}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stopCh:
				return
			case <-time.After(25 * time.Millisecond):
			}
			key := fmt.Sprintf("upgrade-%d", i)
			body := fmt.Sprintf(`{"type":"upgrade","key":%q}`, key)
			for try := 0; try < 20; try++ { // the same key until one agent answers
				a := dc.agents[rng.IntN(len(dc.agents))]
				resp, err := c.Post("http://"+a.http+"/v1/jobs", "application/json", strings.NewReader(body))
				if err != nil {
					continue
				}
				var j apitypes.Job
				err = json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				if err != nil || (resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK) {
					continue
				}
				l.mu.Lock()
				if prev, ok := l.ids[key]; ok && prev != j.ID {
					t.Errorf("key %s: job %s, earlier answer job %s", key, j.ID, prev)
				}
				l.ids[key] = j.ID
				if resp.StatusCode == http.StatusCreated {
					l.created[key]++
				}
				l.mu.Unlock()
				break
			}
		}
	}()
	return l
}

func (l *jobLoad) stop() int {
	close(l.stopCh)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

// checkDone waits until every acknowledged job is done and checks each
// key's creation was reported at most once.
func (l *jobLoad) checkDone(t *testing.T, dc *demoCluster, live map[string]bool, d time.Duration) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	unreported := 0
	for key := range l.ids {
		switch n := l.created[key]; {
		case n > 1:
			t.Errorf("key %s: %d answers said created", key, n)
		case n == 0:
			unreported++ // a retry after an unknown outcome answered "same key"
		}
	}
	if unreported > 0 {
		t.Logf("%d of %d keys were never answered \"created\" (their first try's outcome was unknown and the retry found the job)", unreported, len(l.ids))
	}
	deadline := time.Now().Add(d)
	pending := map[string]string{}
	for k, id := range l.ids {
		pending[k] = id
	}
	for len(pending) > 0 {
		for k, id := range pending {
			j, err := getJSON[apitypes.Job](dc.agents[0].http, "/v1/jobs/"+id)
			if err == nil && j.State == "completed" {
				if j.Attempt > 1 {
					l.retried++
				}
				delete(pending, k)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d of %d acknowledged jobs not completed after %v", len(pending), len(l.ids), d)
			return
		}
		<-time.After(200 * time.Millisecond)
	}
	t.Logf("%d jobs completed, %d of them after more than one attempt (a drain moved the shard while the job ran)", len(l.ids), l.retried)
}

// TestMaxTickGaps tells a handoff's gap from a stall of one owner's
// workload, and counts the step's start as the first tick.
func TestMaxTickGaps(t *testing.T) {
	w := newWitnessChecker()
	t0 := time.Unix(100, 0)
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	w.add([]tick{
		// shard 0: n1 ticks, stalls 40 ms, ticks; then hands over to n2 in 25 ms.
		{Shard: 0, Node: "n1", Epoch: 3, UnixNano: at(-5)}, // before the step: ignored
		{Shard: 0, Node: "n1", Epoch: 3, UnixNano: at(5)},
		{Shard: 0, Node: "n1", Epoch: 3, UnixNano: at(45)},
		{Shard: 0, Node: "n2", Epoch: 4, UnixNano: at(70)},
		{Shard: 0, Node: "n2", Epoch: 4, UnixNano: at(300)}, // after the step: ignored
		// shard 1: first tick 30 ms into the step.
		{Shard: 1, Node: "n3", Epoch: 1, UnixNano: at(30)},
	})
	worst, move := maxTickGaps(w, 2, t0, t0.Add(100*time.Millisecond))
	if worst.d != 40*time.Millisecond || worst.shard != 0 || worst.moved() {
		t.Errorf("worst gap %v (%v), want 40ms on shard 0 without a move", worst.d, worst)
	}
	if move.d != 25*time.Millisecond || !move.moved() || move.String() != "shard 0 n1@3→n2@4" {
		t.Errorf("worst move gap %v (%v), want 25ms, shard 0 n1@3→n2@4", move.d, move)
	}
	if g := (tickGap{d: time.Millisecond, shard: 1, after: tick{Node: "n3", Epoch: 1}}); g.moved() || g.String() != "shard 1 step start→n3@1" {
		t.Errorf("a gap from the step's start: moved %v, %q", g.moved(), g)
	}
}
