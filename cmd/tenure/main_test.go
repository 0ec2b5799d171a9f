package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/cmd/tenure/internal/bench"
)

func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb}
	err := m.Run(context.Background(), args)
	return out.String(), errb.String(), err
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "tenure ") {
		t.Fatalf("version: out=%q err=%v", out, err)
	}
	if _, _, err := run(t, "version", "extra"); err == nil {
		t.Fatal("version with arguments: want error")
	}
}

func TestUnknownCommand(t *testing.T) {
	_, stderr, err := run(t, "frobnicate")
	if err == nil || !strings.Contains(err.Error(), `"frobnicate"`) {
		t.Fatalf("want error naming the command, got %v", err)
	}
	if !strings.Contains(stderr, "usage:") {
		t.Fatalf("want usage on stderr, got %q", stderr)
	}
}

func TestBenchUnknown(t *testing.T) {
	if _, _, err := run(t, "bench", "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("want error naming the benchmark, got %v", err)
	}
	if _, _, err := run(t, "bench"); err == nil {
		t.Fatal("bench with no name: want error")
	}
}

func TestNoArgs(t *testing.T) {
	if _, _, err := run(t); err == nil {
		t.Fatal("no command: want error")
	}
}

func TestCLIPath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ exe, want string }{
		{filepath.Join(wd, "bin", "tenure"), filepath.Join("bin", "tenure")},
		{filepath.Join(wd, "tenure"), "." + string(filepath.Separator) + "tenure"},
		{"/elsewhere/tenure", "/elsewhere/tenure"},
		{"", "tenure"},
	} {
		if got := cliPath(c.exe); got != c.want {
			t.Errorf("cliPath(%q) = %q, want %q", c.exe, got, c.want)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		out, _, err := run(t, arg)
		if err != nil || out != "tenure "+Version+"\n" {
			t.Errorf("%s: out=%q err=%v", arg, out, err)
		}
	}
}

// Every command answers -h and --help with its usage and no error, so the
// process exits 0.
func TestHelpExitsZero(t *testing.T) {
	var cmds [][]string
	for name := range commands {
		cmds = append(cmds, []string{name})
	}
	for _, name := range bench.Names() {
		cmds = append(cmds, []string{"bench", name})
	}
	for _, sub := range []string{"list", "get", "enqueue"} {
		cmds = append(cmds, []string{"jobs", sub})
	}
	for _, sub := range []string{"list", "install"} {
		cmds = append(cmds, []string{"keyring", sub})
	}
	cmds = append(cmds, []string{"node", "revoke"}, []string{"node", "revocations"})
	cmds = append(cmds, []string{"tls", "init"}, []string{"tls", "cert"}, []string{"upgrade", "status"}, []string{"help"})
	for _, c := range cmds {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string(nil), c...), h)
			out, stderr, err := run(t, args...)
			if err != nil {
				t.Errorf("%v: %v", args, err)
			}
			if code := exitCode(io.Discard, err); code != 0 {
				t.Errorf("%v: exit code %d", args, code)
			}
			if !strings.Contains(strings.ToLower(out+stderr), "usage") {
				t.Errorf("%v: no usage printed:\n%s%s", args, out, stderr)
			}
		}
	}
	if _, _, err := run(t, "help", "status"); err != nil {
		t.Errorf("help status: %v", err)
	}
	if code := exitCode(io.Discard, errors.New("boom")); code != 1 {
		t.Errorf("an error: exit code %d", code)
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	addr := fs.String("addr", "", "")
	js := fs.Bool("json", false, "")
	if err := parseFlags(fs, []string{"7", "--addr", "h:1", "8", "--json", "--", "--not-a-flag"}); err != nil {
		t.Fatal(err)
	}
	if *addr != "h:1" || !*js || strings.Join(fs.Args(), " ") != "7 8 --not-a-flag" {
		t.Fatalf("addr %q json %t args %q", *addr, *js, fs.Args())
	}
}
