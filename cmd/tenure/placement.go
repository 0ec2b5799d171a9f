package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Operator placement rules (docs/ring.md): pins and exclusions, committed
// by the control group; they need cluster version 3.

func init() {
	register("pin", "pin a shard to a node (--undo to unpin); the move shows in `tenure moves`", runPin)
	register("exclude", "exclude a node from placement (--undo to let it back)", runExclude)
	register("placement", "list the operator's pins and exclusions", runPlacement)
}

func runPin(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("pin", "pin <shard> <node> [--reason text] | pin --undo <shard> [--addr host:port] [--json]")
	undo := fs.Bool("undo", false, "remove the shard's pin (the shard stays where it is)")
	reason := fs.String("reason", "", "a note shown with the pin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	want := 2
	if *undo {
		want = 1
	}
	if fs.NArg() != want {
		if *undo {
			return errors.New("pin --undo: want one shard id")
		}
		return errors.New("pin: want a shard id and a node id (tenure pin 17 node-2)")
	}
	shard, err := strconv.ParseUint(fs.Arg(0), 10, 32)
	if err != nil {
		return fmt.Errorf("pin: shard %q: want a shard id (0, 1, ...)", fs.Arg(0))
	}
	node := ""
	if !*undo {
		node = fs.Arg(1)
	}
	call := func(c *client.Client, ctx context.Context) (apitypes.PlacementRules, error) {
		return c.Pin(ctx, uint32(shard), node, *reason)
	}
	return fetch(ctx, m, cf, call, func(w io.Writer, v any) { rulesTable(w, v.(apitypes.PlacementRules)) })
}

func runExclude(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("exclude", "exclude <node> [--undo] [--reason text] [--addr host:port] [--json]")
	undo := fs.Bool("undo", false, "lift the node's exclusion")
	reason := fs.String("reason", "", "a note shown with the exclusion")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return errors.New("exclude: want one node id")
	}
	call := func(c *client.Client, ctx context.Context) (apitypes.PlacementRules, error) {
		return c.Exclude(ctx, fs.Arg(0), !*undo, *reason)
	}
	return fetch(ctx, m, cf, call, func(w io.Writer, v any) { rulesTable(w, v.(apitypes.PlacementRules)) })
}

func runPlacement(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("placement", "placement [--addr host:port] [--json]")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	return fetch(ctx, m, cf, (*client.Client).PlacementRules, func(w io.Writer, v any) { rulesTable(w, v.(apitypes.PlacementRules)) })
}

func rulesTable(w io.Writer, r apitypes.PlacementRules) {
	if len(r.Pins)+len(r.Excluded) == 0 {
		fmt.Fprintln(w, "no pins or exclusions")
		return
	}
	fmt.Fprintln(w, "RULE\tSHARD\tNODE\tSINCE\tREASON")
	for _, p := range r.Pins {
		fmt.Fprintf(w, "pin\t%d\t%s\t%s\t%s\n", p.Shard, p.Node, p.At.Format("2006-01-02 15:04:05"), orDash(p.Reason))
	}
	for _, e := range r.Excluded {
		fmt.Fprintf(w, "exclude\t-\t%s\t%s\t%s\n", e.Node, e.At.Format("2006-01-02 15:04:05"), orDash(e.Reason))
	}
}
