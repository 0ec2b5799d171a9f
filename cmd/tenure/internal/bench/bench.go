// Package bench holds the `tenure bench <name>` benchmarks; cmd/tenure
// only wires the subcommand to Run.
package bench

import (
	"context"
	"encoding/json"
	"flag"
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

// agentClusterFlags are the flags of the benchmarks that start a cluster
// of real agent processes (bench failover, bench idle).
type agentClusterFlags struct {
	nodes      int
	profile    string
	json       bool
	partitions int
	dir        string
	agentBin   string
}

func (o *agentClusterFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&o.nodes, "nodes", 5, "agent processes (3 of them form the control group)")
	fs.StringVar(&o.profile, "profile", "default", "lease profile: fast, default or safe")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object (progress goes to stderr)")
	fs.IntVar(&o.partitions, "partitions", 32, "shards in the benchmark cluster")
	fs.StringVar(&o.dir, "dir", "", "parent of the agents' data dirs and logs (default: a temp dir, removed afterwards)")
	fs.StringVar(&o.agentBin, "agent-bin", "", "tenure binary to run agents with (default: this executable)")
}

// writeJSONLine writes v to w as one line of JSON (a benchmark's --json summary).
func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
