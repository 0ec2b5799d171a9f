package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/benchkit"
)

// TestMain lets the test binary act as the holder child when the smoke
// test re-executes it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == holderCommand {
		if err := runHolder(context.Background(), os.Args[2:], os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseFlagsRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "nap"}, `-mode "nap"`},
		{[]string{"-ttl", "1500ms"}, "-ttl 1.5s"},
		{[]string{"-ttl", "0s"}, "-ttl 0s"},
		{[]string{"-runs", "0"}, "-runs 0"},
		{[]string{"-proposers", "1,x"}, `"x"`},
		{[]string{"-duration", "-1s"}, "-duration"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		var stderr bytes.Buffer
		_, err := parseFlags(tc.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestParseFlagsDefaultsAndProfile(t *testing.T) {
	o, err := parseFlags([]string{"-ttl", "1s", "-tuned", "-seed", "7"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.runs != 20 || o.mode != "crash" || o.timing != tunedTimings || o.seed != 7 {
		t.Errorf("options = %+v", o)
	}
	if got := profileName(o); got != "etcd-ttl-1s-tuned" {
		t.Errorf("profile = %q", got)
	}
}

func TestMinLeaseTTL(t *testing.T) {
	if got := defaultTimings.minLeaseTTL(); got != 2*time.Second {
		t.Errorf("default timings: %v, want 2s", got)
	}
	if got := tunedTimings.minLeaseTTL(); got != time.Second {
		t.Errorf("tuned timings: %v, want 1s", got)
	}
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0.5: 5, 0.99: 10, 0: 1, 1: 10} {
		if got := benchkit.NearestRank(s, q); got != want {
			t.Errorf("benchkit.NearestRank(%v) = %v, want %v", q, got, want)
		}
	}
	if benchkit.NearestRank(nil, 0.5) != 0 {
		t.Error("benchkit.NearestRank(nil) != 0")
	}
}

// TestSmoke runs one crash and one resign failover against a real embedded
// cluster. It takes several seconds, so -short skips it.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd cluster")
	}
	for _, mode := range []string{"crash", "resign"} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := run(ctx, []string{"-runs", "1", "-mode", mode, "-json", "-dir", t.TempDir()}, &stdout, &stderr)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, stderr.String())
		}
		var s summary
		if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
			t.Fatalf("%s: %v: %q", mode, err, stdout.String())
		}
		if s.Mode != mode || s.Runs != 1 || s.Overlaps != 0 || s.MinMs < 0 || s.GrantedTTLMs != 2000 {
			t.Errorf("%s: summary %+v", mode, s)
		}
	}
}
