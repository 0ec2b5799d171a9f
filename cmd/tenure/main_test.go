package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
