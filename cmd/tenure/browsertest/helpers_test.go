package browsertest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
)

// newFakeAPI is the API over f; it closes with the test.
func newFakeAPI(t *testing.T, f *httpapitest.Node, o httpapi.Options) *httpapi.Handler {
	t.Helper()
	h, err := httpapi.NewWithBackend(f, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-time.After(10 * time.Millisecond)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// tenureBinary builds github.com/tenurehq/tenure/cmd/tenure once per test
// run (the replace directive in go.mod points it at this tree).
func tenureBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped under -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tenure-browser-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "tenure")
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go binary on PATH to build tenure: %w", err)
			return
		}
		// Built in the library's module (three levels up), whose go.sum
		// covers the agent's dependencies; this module's covers its tests'.
		build := exec.Command(gobin, "build", "-o", builtBin, "./cmd/tenure")
		build.Dir = filepath.Join("..", "..", "..")
		out, err := build.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// demo is a `tenure demo` process and what its introduction printed.
type demo struct {
	dashboard   string // http://host:port/
	drainee     string // the node id the intro suggests draining
	draineeHTTP string // its HTTP address
	victim      string // the node id the intro suggests crashing
	victimPID   int    // its process id
}

var (
	dashboardLine = regexp.MustCompile(`dashboard\s+(http://\S+)`)
	drainLine     = regexp.MustCompile(`drain --addr (\S+)\s+# hand (\S+)'s shards over`)
	killLine      = regexp.MustCompile(`kill -9 (\d+)\s+# crash (\S+):`)
)

// startDemo runs `tenure demo` with n agents and waits for its
// introduction; the demo is interrupted and awaited at cleanup.
func startDemo(t *testing.T, bin string, n, partitions int) demo {
	t.Helper()
	cmd := exec.Command(bin, "demo", "--nodes", fmt.Sprint(n), "--partitions", fmt.Sprint(partitions), "--agent-bin", bin)
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var d demo
	found := make(chan struct{})
	var mu sync.Mutex
	var log []byte
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			log = append(log, line+"\n"...)
			if m := dashboardLine.FindStringSubmatch(line); m != nil {
				d.dashboard = m[1]
			}
			if m := drainLine.FindStringSubmatch(line); m != nil {
				d.draineeHTTP, d.drainee = m[1], m[2]
			}
			if m := killLine.FindStringSubmatch(line); m != nil {
				d.victimPID, _ = strconv.Atoi(m[1])
				d.victim = m[2]
			}
			done := d.dashboard != "" && d.drainee != "" && d.victim != ""
			mu.Unlock()
			if done && !signalled {
				signalled = true
				close(found)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case <-waited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("tenure demo output:\n%s", log)
			mu.Unlock()
		}
	})
	select {
	case <-found:
	case <-time.After(120 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("tenure demo printed no dashboard, drain and kill lines after 120s:\n%s", log)
	}
	mu.Lock()
	defer mu.Unlock()
	return d
}
