package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Rolling upgrades over the CLI (docs/upgrades.md).

func init() {
	register("upgrade", "show the cluster version and what blocks finalizing, or finalize it (status, finalize)", runUpgrade)
}

func runUpgrade(ctx context.Context, m *Main, args []string) error {
	usage := "upgrade status|finalize [--addr host:port] [--json]"
	valid := func(a string) bool { return a == "status" || a == "finalize" }
	op, done, err := m.subcommand(args, usage, valid, errors.New("upgrade: want a subcommand: status or finalize"))
	if done {
		return err
	}
	fs, cf := m.clientFlagSet("upgrade "+op, usage)
	if err := noArgs(fs, args[1:]); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var us apitypes.UpgradeStatus
	if op == "status" {
		us, err = c.UpgradeStatus(ctx)
	} else {
		us, err = c.FinalizeUpgrade(ctx)
	}
	if err != nil {
		return explain(c, err)
	}
	if cf.json {
		return m.print(cf, us, nil)
	}
	upgradeTable(m.Stdout, us)
	if op == "finalize" {
		fmt.Fprintf(m.Stdout, "finalized: the cluster runs version %d; binaries that do not speak it are refused from now on\n", us.Active)
	}
	return nil
}

func upgradeTable(w io.Writer, us apitypes.UpgradeStatus) {
	fmt.Fprintf(w, "active version %d; this binary speaks %d..%d; finalizable to %d", us.Active, us.BinaryMin, us.BinaryMax, us.Target)
	switch {
	case len(us.Blockers) > 0:
		fmt.Fprintf(w, " (held back by %s)", strings.Join(us.Blockers, ", "))
	case us.Target > us.Active && us.ManualFinalize:
		fmt.Fprint(w, " (waiting for `tenure upgrade finalize`)")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSPEAKS\tLIVE\tBLOCKING")
	for _, n := range us.Nodes {
		fmt.Fprintf(tw, "%s\t%d..%d\t%t\t%t\n", n.ID, n.Min, n.Max, n.Live, n.Blocking)
	}
	_ = tw.Flush()
}
