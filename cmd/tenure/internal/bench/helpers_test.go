package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// run runs `tenure bench ...` in-process: args[0] must be "bench". A help
// request returns nil, as the CLI's Run does.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	if len(args) == 0 || args[0] != "bench" {
		t.Fatalf("run: want args starting with \"bench\", got %q", args)
	}
	var out, errb bytes.Buffer
	err := Run(context.Background(), &Env{Stdout: &out, Stderr: &errb}, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		err = nil
	}
	return out.String(), errb.String(), err
}

var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// tenureBinary builds cmd/tenure once for the tests that start agent
// processes; skipped under -short.
func tenureBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts agent processes: skipped under -short")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tenure-bench-bin-")
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
		out, err := exec.Command(gobin, "build", "-o", builtBin, "github.com/tenurehq/tenure/cmd/tenure").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}
