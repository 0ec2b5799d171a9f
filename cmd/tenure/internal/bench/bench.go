// Package bench holds the `tenure bench <name>` benchmarks; cmd/tenure
// only wires the subcommand to Run.
package bench

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
)

// Env is the I/O a benchmark writes to (the CLI's stdout and stderr).
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
}

// benchmark is one `tenure bench <name>` subcommand.
type benchmark struct {
	summary string
	run     func(ctx context.Context, m *Env, args []string) error
}

// benchmarks holds the `tenure bench <name>` subcommands; files register
// theirs in init with registerBench.
var benchmarks = map[string]benchmark{}

func registerBench(name, summary string, run func(ctx context.Context, m *Env, args []string) error) {
	if _, dup := benchmarks[name]; dup {
		panic("tenure: benchmark registered twice: " + name)
	}
	benchmarks[name] = benchmark{summary: summary, run: run}
}

// Run runs `tenure bench <args>`: args[0] names the benchmark, the rest
// are its flags. A help request prints the list and returns nil.
func Run(ctx context.Context, m *Env, args []string) error {
	if len(args) == 0 {
		Usage(m.Stderr)
		return fmt.Errorf("bench: no benchmark named")
	}
	if cli.IsHelp(args[0]) {
		Usage(m.Stdout)
		return nil
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		Usage(m.Stderr)
		return fmt.Errorf("bench: unknown benchmark %q", args[0])
	}
	return b.run(ctx, m, args[1:])
}

// Usage prints the benchmarks and their summaries.
func Usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenure bench <name> [flags]")
	for _, n := range Names() {
		fmt.Fprintf(w, "  %-10s %s\n", n, benchmarks[n].summary)
	}
}

// Names returns the benchmarks' names, sorted.
func Names() []string {
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
