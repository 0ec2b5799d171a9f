package tier3

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

var (
	seedsFlag = flag.Int("tier3.seeds", 3, "how many tier-2 random seeds to replay")
	runsFlag  = flag.Int("tier3.runs", 2, "runs per seed that must be byte-identical")
)

// buildWasm compiles the tier-2 test binary for wasip1.
func buildWasm(t *testing.T) []byte {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go binary on PATH: %v", err)
	}
	out := filepath.Join(t.TempDir(), "tier2.wasm")
	cmd := exec.Command(gobin, "test", "-c", "-o", out, "github.com/tenurehq/tenure/simulation/tier2")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tier2 for wasip1: %v\n%s", err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

var traceLine = regexp.MustCompile(`trace (\S+) seed=(\d+) ([0-9a-f]{16})`)

// TestExactReplay runs each seed's tier-2 scenario several times under
// wazero and demands byte-identical output, trace digest included, and
// different digests for different seeds.
func TestExactReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("tier 3 compiles and runs a wasm test binary; skipped with -short")
	}
	ctx := context.Background()
	wasm := buildWasm(t)
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("compile wasm: %v", err)
	}
	digests := map[string]int64{}
	for i := range *seedsFlag {
		seed := int64(1000 + i)
		var first []byte
		var digest string
		for run := range *runsFlag {
			start := time.Now()
			out := runOnce(ctx, t, rt, compiled, seed)
			m := traceLine.FindSubmatch(out)
			if m == nil {
				t.Fatalf("seed %d run %d: no trace line in the output:\n%s", seed, run, out)
			}
			t.Logf("seed %d run %d: trace %s (%v wall)", seed, run, m[3], time.Since(start).Round(time.Millisecond))
			if run == 0 {
				first, digest = out, string(m[3])
				continue
			}
			if !bytes.Equal(out, first) {
				t.Errorf("seed %d: run %d differs from run 0 (trace %s vs %s); replay: go test ./simulation/tier3 -tier3.seeds=%d\n--- run 0:\n%s\n--- run %d:\n%s",
					seed, run, m[3], digest, i+1, first, run, out)
			}
		}
		if prev, ok := digests[digest]; ok {
			t.Errorf("seeds %d and %d produced the same trace %s: the digest does not see the history", prev, seed, digest)
		}
		digests[digest] = seed
	}
}

// runOnce runs the tier-2 test binary for one seed and returns its output.
func runOnce(ctx context.Context, t *testing.T, rt wazero.Runtime, compiled wazero.CompiledModule, seed int64) []byte {
	t.Helper()
	var out bytes.Buffer
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithArgs("tier2.wasm", "-test.run=^TestTier2$", "-test.v", fmt.Sprintf("-tier2.seed=%d", seed)).
		WithStdout(&out).WithStderr(&out)
	mod, err := rt.InstantiateModule(ctx, compiled, cfg)
	if mod != nil {
		_ = mod.Close(ctx)
	}
	var exit *sys.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 0) {
		t.Fatalf("seed %d: tier2 under wazero: %v\n%s", seed, err, out.Bytes())
	}
	return out.Bytes()
}
