package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Fenced takeover (docs/guarantees.md): shard ranges whose owner is
// replaced as soon as it is detected dead, without waiting out its lease.
// S4 is waived for them; it needs cluster version 4.

func init() {
	register("fenced", "list or change the shards under fenced takeover (S4 waived: fail over without waiting out the lease)", runFenced)
}

func runFenced(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("fenced", "fenced [--set F[-L] | --unset F[-L]] [--addr host:port] [--json]")
	set := fs.String("set", "", "put shards F..L (or shard F) under fenced takeover")
	unset := fs.String("unset", "", "put shards F..L (or shard F) back under the lease rule")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	table := func(w io.Writer, v any) { fencedTable(w, v.(apitypes.FencedPolicy)) }
	if *set != "" && *unset != "" {
		return errors.New("fenced: --set or --unset, not both")
	}
	if *set == "" && *unset == "" {
		return fetch(ctx, m, cf, (*client.Client).FencedPolicy, table)
	}
	spec, fenced := *set, true
	if *unset != "" {
		spec, fenced = *unset, false
	}
	first, last, err := parseShardRange(spec)
	if err != nil {
		return fmt.Errorf("fenced: %w", err)
	}
	call := func(c *client.Client, ctx context.Context) (apitypes.FencedPolicy, error) {
		return c.SetFenced(ctx, first, last, fenced)
	}
	return fetch(ctx, m, cf, call, table)
}

// parseShardRange reads "F" or "F-L".
func parseShardRange(s string) (first, last uint32, err error) {
	a, b, isRange := strings.Cut(s, "-")
	f, err1 := strconv.ParseUint(a, 10, 32)
	l, err2 := f, error(nil)
	if isRange {
		l, err2 = strconv.ParseUint(b, 10, 32)
	}
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, fmt.Errorf("shard range %q: want F or F-L (shard ids)", s)
	case f > l:
		return 0, 0, fmt.Errorf("shard range %q: first after last", s)
	}
	return uint32(f), uint32(l), nil
}

func fencedTable(w io.Writer, p apitypes.FencedPolicy) {
	if len(p.Ranges) == 0 {
		fmt.Fprintln(w, "no shards under fenced takeover")
		return
	}
	fmt.Fprintln(w, "FIRST\tLAST\tSHARDS")
	for _, r := range p.Ranges {
		fmt.Fprintf(w, "%d\t%d\t%d\n", r.First, r.Last, uint64(r.Last)-uint64(r.First)+1)
	}
}
