package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// The committed deny-list (docs/security.md, "Revoking a node"): a revoked
// node id or certificate serial is refused at every handshake of the
// Raft/RPC port and owns nothing. It needs cluster version 5 and an admin
// token (the agent forwards it under a voter-capable node's certificate).

func init() {
	register("node", "revoke a node's identity or certificate, or list the revocations (tenure node -h)", runNode)
}

func runNode(ctx context.Context, m *Main, args []string) error {
	const help = "node revoke <id> [--serial hex] [--reason text] [--undo] | node revoke --serial hex | node revocations [--addr host:port] [--json]"
	usage := errors.New("node: want `node revoke <id> [--serial hex] [--reason text] [--undo]`, `node revoke --serial hex` or `node revocations`")
	anySub := func(string) bool { return true } // an unknown one falls through the switch to usage
	if _, done, err := m.subcommand(args, help, anySub, usage); done {
		return err
	}
	table := func(w io.Writer, v any) { revocationsTable(w, v.(apitypes.Revocations)) }
	switch args[0] {
	case "revocations":
		fs, cf := m.clientFlagSet("node revocations", "node revocations [--addr host:port] [--json]")
		if err := noArgs(fs, args[1:]); err != nil {
			return err
		}
		return fetch(ctx, m, cf, (*client.Client).Revocations, table)
	case "revoke":
		fs, cf := m.clientFlagSet("node revoke", "node revoke <id> [--serial hex] [--reason text] [--undo] [--addr host:port] [--json]")
		serial := fs.String("serial", "", "also (or, without an id, only) revoke the certificate with this serial number (hex)")
		reason := fs.String("reason", "", "a note shown with the revocation")
		undo := fs.Bool("undo", false, "lift this revocation (the node may connect and register again)")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		id := ""
		switch {
		case fs.NArg() == 1 && fs.Arg(0) != "":
			id = fs.Arg(0)
		case fs.NArg() == 0 && *serial != "":
		default:
			return usage
		}
		req := apitypes.RevokeRequest{Node: id, Serial: *serial, Reason: *reason, Lift: *undo}
		call := func(c *client.Client, ctx context.Context) (apitypes.Revocations, error) { return c.Revoke(ctx, req) }
		return fetch(ctx, m, cf, call, table)
	}
	return usage
}

func revocationsTable(w io.Writer, r apitypes.Revocations) {
	if len(r.Revoked) == 0 {
		fmt.Fprintln(w, "no revocations")
		return
	}
	fmt.Fprintln(w, "NODE\tSERIAL\tSINCE\tREASON")
	for _, e := range r.Revoked {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", orDash(e.Node), orDash(e.Serial), e.At.Format("2006-01-02 15:04:05"), orDash(e.Reason))
	}
}
