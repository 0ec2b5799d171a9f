// Package proc starts example binaries as child processes for the
// examples' tests: free loopback ports, a built binary, and a log tail on
// failure.
package proc

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Build compiles the package in dir (relative to the test's directory)
// into a temporary directory and returns the binary's path.
func Build(t testing.TB, dir, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, b)
	}
	return out
}

// Buffer is a goroutine-safe output sink.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Tail returns the last n lines.
func (b *Buffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(b.b.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Proc is a started child process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *Buffer
	done chan struct{}
}

// Start runs bin with args; the process is killed when the test ends, and
// its output is printed if the test failed.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), Out: &Buffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output (last 40 lines):\n%s", name, p.Out.Tail(40))
		}
	})
	return p
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitUntil polls cond every 50 ms until it holds, failing the test at
// the deadline or when ctx ends. The condition reads state over the
// network, so there is no event to wait on; the deadline bounds it.
func WaitUntil(t testing.TB, ctx context.Context, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tk.C:
		}
	}
}
