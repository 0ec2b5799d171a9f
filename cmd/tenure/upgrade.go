package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/tenurehq/tenure/node"
)

// Rolling upgrades (docs/upgrades.md): GET /v1/upgrade shows the cluster
// version, what each node speaks and what blocks finalizing; POST
// /v1/upgrade/finalize raises it (irreversible).

// upgradeNode is the part of an agent's node that knows cluster versions
// (optional: the API answers 501 without it).
type upgradeNode interface {
	UpgradeStatus() (node.UpgradeStatus, error)
	FinalizeUpgrade(ctx context.Context) (node.UpgradeStatus, error)
}

func (a *nodeAdapter) UpgradeStatus() (node.UpgradeStatus, error) {
	us, err := a.n.UpgradeStatus()
	return us, classifyKeyring(err)
}

func (a *nodeAdapter) FinalizeUpgrade(ctx context.Context) (node.UpgradeStatus, error) {
	us, err := a.n.FinalizeUpgrade(ctx)
	if errors.Is(err, node.ErrNothingToFinalize) {
		return us, fmt.Errorf("%w: %w", errConflict, err)
	}
	return us, classifyKeyring(err)
}

func (a *api) upgradeNode(w http.ResponseWriter) (upgradeNode, bool) {
	un, ok := a.cfg.Node.(upgradeNode)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this node has no cluster version")
	}
	return un, ok
}

func (a *api) upgradeStatus(w http.ResponseWriter, r *http.Request) {
	un, ok := a.upgradeNode(w)
	if !ok {
		return
	}
	us, err := un.UpgradeStatus()
	if err != nil {
		writeKeyringError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, us)
}

func (a *api) upgradeFinalize(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	un, ok := a.upgradeNode(w)
	if !ok {
		return
	}
	us, err := un.FinalizeUpgrade(r.Context())
	if err != nil {
		writeKeyringError(w, err)
		return
	}
	a.log.Warn("cluster version finalized: nodes can no longer go back to a binary that does not speak it", "version", us.Active)
	writeJSON(w, http.StatusOK, us)
}

func init() {
	register("upgrade", "show the cluster version and what blocks finalizing, or finalize it (status, finalize)", runUpgrade)
}

func runUpgrade(ctx context.Context, m *Main, args []string) error {
	usage := "upgrade status|finalize [--addr host:port] [--json]"
	if len(args) == 0 || (args[0] != "status" && args[0] != "finalize") {
		fmt.Fprintf(m.Stderr, "usage: tenure %s\n", usage)
		return errors.New("upgrade: want a subcommand: status or finalize")
	}
	op := args[0]
	fs, cf := m.clientFlagSet("upgrade "+op, usage)
	if err := noArgs(fs, args[1:]); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var us node.UpgradeStatus
	if op == "status" {
		_, err = c.call(ctx, http.MethodGet, "/v1/upgrade", nil, &us)
	} else {
		_, err = c.call(ctx, http.MethodPost, "/v1/upgrade/finalize", nil, &us)
	}
	if err != nil {
		return err
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

func upgradeTable(w io.Writer, us node.UpgradeStatus) {
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
