// Command tenure is the demo cluster binary: it runs agents, a local demo
// cluster, operator commands against an agent's HTTP API, and benchmarks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	if err := m.Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(m.Stderr, "tenure:", err)
		os.Exit(1)
	}
}

// Main holds the CLI's I/O so tests can run it in-process.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (TENURE_*, HOSTNAME, CLUSTER_NAME);
	// nil means os.Getenv. Tests set it to a map lookup.
	Getenv func(string) string
}

// getenv reads one environment variable through m.Getenv.
func (m *Main) getenv(key string) string {
	if m.Getenv == nil {
		return os.Getenv(key)
	}
	return m.Getenv(key)
}

// NewMain returns a Main wired to the process's stdout and stderr.
func NewMain() *Main { return &Main{Stdout: os.Stdout, Stderr: os.Stderr} }

// command is one subcommand. Files register theirs in init with register.
type command struct {
	summary string
	run     func(ctx context.Context, m *Main, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, m *Main, args []string) error) {
	if _, dup := commands[name]; dup {
		panic("tenure: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func init() {
	register("version", "print the version", func(_ context.Context, m *Main, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("version takes no arguments, got %q", strings.Join(args, " "))
		}
		fmt.Fprintln(m.Stdout, "tenure", Version)
		return nil
	})
}

// Run parses args (without the program name) and runs the subcommand.
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		m.usage(m.Stdout)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		m.usage(m.Stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return c.run(ctx, m, args[1:])
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenure <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
