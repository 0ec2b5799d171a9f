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

	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	os.Exit(exitCode(m.Stderr, m.Run(ctx, os.Args[1:])))
}

// exitCode is the process's exit status for Run's error: 0 for none or
// for a help request (-h, --help), 1 otherwise, printed on stderr.
func exitCode(stderr io.Writer, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "tenure:", err)
	return 1
}

// Main holds the CLI's I/O so tests can run it in-process.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (HOSTNAME, CLUSTER_NAME, the client
	// commands' TENURE_ADDR and TENURE_TOKEN...; the agent reads its TENURE_*
	// settings from the process environment through ff);
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
		if len(args) == 1 && isHelp(args[0]) {
			fmt.Fprintln(m.Stdout, "usage: tenure version (or tenure --version)")
			return nil
		}
		if len(args) > 0 {
			return fmt.Errorf("version takes no arguments, got %q", strings.Join(args, " "))
		}
		fmt.Fprintln(m.Stdout, "tenure", Version)
		return nil
	})
}

// Run parses args (without the program name) and runs the subcommand. A
// help request (-h or --help anywhere a command parses flags, `tenure help
// [command]`) prints the usage and returns nil.
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "-v") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 2 && args[0] == "help" {
		if _, ok := commands[args[1]]; ok {
			args = []string{args[1], "--help"}
		}
	}
	if len(args) == 0 || args[0] == "help" || isHelp(args[0]) {
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
	err := c.run(ctx, m, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag set printed the usage
	}
	return err
}

// isHelp and parseFlags are the CLI helpers the benchmarks share
// (cmd/tenure/internal/cli).
var (
	isHelp     = cli.IsHelp
	parseFlags = cli.ParseFlags
)

// subcommand starts a command whose first argument names a subcommand.
// -h or --help prints "usage: tenure <usage>" to stdout and returns done. No
// argument, or one valid rejects, prints the same to stderr and returns
// missing. Otherwise it returns the subcommand for the caller to dispatch.
func (m *Main) subcommand(args []string, usage string, valid func(string) bool, missing error) (sub string, done bool, err error) {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintf(m.Stdout, "usage: tenure %s\n", usage)
		return "", true, nil
	}
	if len(args) == 0 || !valid(args[0]) {
		fmt.Fprintf(m.Stderr, "usage: tenure %s\n", usage)
		return "", true, missing
	}
	return args[0], false, nil
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tenure <command> [arguments]")
	fmt.Fprintln(w, "       tenure <command> --help, tenure --version")
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
