package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests build the tenure binary once and run agents as
// processes on loopback. They are skipped under -short.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// tenureBinary builds cmd/tenure once per test run.
func tenureBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped under -short")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tenure-e2e-bin-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "tenure")
		// go test puts its own GOROOT/bin first on PATH.
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go binary on PATH to build tenure: %w", err)
			return
		}
		out, err := exec.Command(gobin, "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// startCluster starts n agents with the demo's launcher and waits until
// all are ready. The cluster is stopped at cleanup.
func startCluster(t *testing.T, n, partitions int) *demoCluster {
	t.Helper()
	bin := tenureBinary(t)
	dc, err := startDemo(bin, t.TempDir(), n, partitions, "fast")
	if dc != nil {
		t.Cleanup(func() {
			dc.stop(testWriter{t})
			if t.Failed() {
				for _, a := range dc.agents {
					t.Logf("--- %s log (tail):\n%s", a.id, tail(a.logPath, 40))
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
	return dc
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

var e2eClient = &http.Client{Timeout: 3 * time.Second}

func getJSON[T any](addr, path string) (T, error) {
	var v T
	resp, err := e2eClient.Get("http://" + addr + path)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s%s: %s", addr, path, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// actingOwners asks every live agent which shards it acts on and returns,
// per shard, the agents acting on it.
func actingOwners(dc *demoCluster, live map[string]bool) (map[uint32][]string, error) {
	out := map[uint32][]string{}
	for _, a := range dc.agents {
		if !live[a.id] {
			continue
		}
		shards, err := getJSON[[]apitypes.Shard](a.http, "/v1/shards")
		if err != nil {
			return nil, err
		}
		for _, s := range shards {
			if _, ok := out[s.Shard]; !ok {
				out[s.Shard] = nil
			}
			if s.Acting {
				out[s.Shard] = append(out[s.Shard], a.id)
			}
		}
	}
	return out, nil
}

// waitOneActingOwner waits until every one of partitions shards has
// exactly one acting owner among the live agents, none of them in avoid.
func waitOneActingOwner(t *testing.T, dc *demoCluster, live map[string]bool, partitions int, avoid string, d time.Duration) map[uint32]string {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for {
		owners, err := actingOwners(dc, live)
		if err == nil {
			single := map[uint32]string{}
			ok := len(owners) == partitions
			for s, ids := range owners {
				if len(ids) != 1 || ids[0] == avoid {
					ok = false
					last = fmt.Sprintf("shard %d acting on %v", s, ids)
					break
				}
				single[s] = ids[0]
			}
			if ok {
				return single
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single acting owner for every shard after %s: %s", d, last)
		}
		<-time.After(50 * time.Millisecond)
	}
}

// TestE2EFailoverAndDrain is the acceptance test: 5 agents, every
// shard has exactly one acting owner, kill -9 one shard's owner and see a
// new owner act, drain another and see, via the witness, zero overlap.
func TestE2EFailoverAndDrain(t *testing.T) {
	const partitions = 32
	dc := startCluster(t, 5, partitions)
	live := map[string]bool{}
	for _, a := range dc.agents {
		live[a.id] = true
	}
	owners := waitOneActingOwner(t, dc, live, partitions, "", 60*time.Second)

	// kill -9 the owner of shard 0.
	victimID := owners[0]
	var victim *demoAgent
	for _, a := range dc.agents {
		if a.id == victimID {
			victim = a
		}
	}
	killedAt := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	delete(live, victimID)
	var newOwner string
	deadline := time.Now().Add(60 * time.Second)
	for newOwner == "" {
		if time.Now().After(deadline) {
			t.Fatalf("shard 0 has no new acting owner 60s after killing %s", victimID)
		}
		if o, err := actingOwners(dc, live); err == nil && len(o[0]) == 1 {
			newOwner = o[0][0]
			break
		}
		<-time.After(20 * time.Millisecond)
	}
	failover := time.Since(killedAt)
	t.Logf("kill -9 %s → %s acting on shard 0 after %s (API poll)", victimID, newOwner, failover.Round(time.Millisecond))
	waitOneActingOwner(t, dc, live, partitions, "", 60*time.Second)

	// Drain another agent through the CLI.
	var drained *demoAgent
	for _, a := range dc.agents {
		if live[a.id] && a.id != newOwner {
			drained = a
			break
		}
	}
	drainStart := time.Now()
	out, stderr, err := runEnv(t, nil, "drain", "--addr", drained.http, "--wait", "60s")
	if err != nil {
		t.Fatalf("drain %s: %v\n%s", drained.id, err, stderr)
	}
	t.Logf("drain %s: %s(took %s)", drained.id, out, time.Since(drainStart).Round(time.Millisecond))
	waitOneActingOwner(t, dc, live, partitions, drained.id, 60*time.Second)

	// Let the witness see a few more ticks of the new placement, then
	// check the whole history.
	seen := dc.witness.check(1).Ticks
	waitFor(t, 30*time.Second, "more witness ticks", func() bool { return dc.witness.check(1).Ticks > seen+partitions*3 })
	r := dc.witness.check(20)
	t.Logf("witness: %d ticks on %d shards", r.Ticks, r.Shards)
	if ts := firstTickAfter(dc.witness, 0, victimID, killedAt); !ts.IsZero() {
		t.Logf("kill -9 %s → first witness tick on shard 0 by the new owner after %s", victimID, ts.Sub(killedAt).Round(time.Millisecond))
	}
	if r.Shards != partitions {
		t.Errorf("witness saw %d shards, want %d", r.Shards, partitions)
	}
	for _, v := range r.Violations {
		t.Error("overlap: " + v)
	}
}

// firstTickAfter returns the time of the first tick of shard after t0 by a
// node other than old.
func firstTickAfter(c *witnessChecker, shard uint32, old string, t0 time.Time) time.Time {
	for _, tk := range c.ticksOf(shard) {
		if tk.UnixNano > t0.UnixNano() && tk.Node != old {
			return time.Unix(0, tk.UnixNano)
		}
	}
	return time.Time{}
}

// TestE2EDemoCommand runs `tenure demo` in-process with the built binary
// as its agents and stops it by cancelling the context.
func TestE2EDemoCommand(t *testing.T) {
	bin := tenureBinary(t)
	var out syncBuffer
	m := &Main{Stdout: &out, Stderr: &out}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, []string{"demo", "--nodes", "3", "--partitions", "16", "--agent-bin", bin}) }()
	waitFor(t, 90*time.Second, "demo intro", func() bool {
		select {
		case err := <-done:
			t.Fatalf("demo returned early: %v\n%s", err, out.String())
		default:
		}
		return containsAll(out.String(), "dashboard  http://", "kill -9", "tenure drain --addr")
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("demo did not stop\n%s", out.String())
	}
	if !containsAll(out.String(), "witness:", "0 overlaps") {
		t.Fatalf("no witness verdict:\n%s", out.String())
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
