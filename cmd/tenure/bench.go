package main

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// benchmarks holds the `tenure bench <name>` subcommands; files register
// theirs in init with registerBench.
var benchmarks = map[string]command{}

func registerBench(name, summary string, run func(ctx context.Context, m *Main, args []string) error) {
	if _, dup := benchmarks[name]; dup {
		panic("tenure: benchmark registered twice: " + name)
	}
	benchmarks[name] = command{summary: summary, run: run}
}

func init() {
	register("bench", "run a benchmark (tenure bench <name> -h)", func(ctx context.Context, m *Main, args []string) error {
		if len(args) == 0 {
			benchUsage(m.Stderr)
			return fmt.Errorf("bench: no benchmark named")
		}
		if isHelp(args[0]) {
			benchUsage(m.Stdout)
			return nil
		}
		b, ok := benchmarks[args[0]]
		if !ok {
			benchUsage(m.Stderr)
			return fmt.Errorf("bench: unknown benchmark %q", args[0])
		}
		return b.run(ctx, m, args[1:])
	})
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenure bench <name> [flags]")
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, benchmarks[n].summary)
	}
}
