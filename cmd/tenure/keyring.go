package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// The gossip keyring over the CLI. Rotation is three rounds, each done on
// every node before the next (docs/security.md): install the new key, use
// it, remove the old one. `tenure keyring` runs one round on every member
// the agent at --addr knows (or only that agent with --one).

func init() {
	register("keyring", "list or rotate the gossip encryption keys (list, install, use, remove)", runKeyring)
}

// runKeyring: tenure keyring list|install|use|remove [--key K] [--one].
func runKeyring(ctx context.Context, m *Main, args []string) error {
	usage := "keyring list|install|use|remove [--key BASE64] [--one] [--addr host:port]"
	notFlag := func(a string) bool { return !strings.HasPrefix(a, "-") }
	op, done, err := m.subcommand(args, usage, notFlag, errors.New("keyring: want a subcommand: list, install, use or remove"))
	if done {
		return err
	}
	if op != "list" && !slices.Contains(apitypes.KeyringOps, op) {
		return fmt.Errorf("keyring: unknown subcommand %q: want list, install, use or remove", op)
	}
	fs, cf := m.clientFlagSet("keyring "+op, usage)
	key := fs.String("key", m.getenv("TENURE_KEYRING_KEY"), "the key, base64 (env TENURE_KEYRING_KEY; `tenure keygen` makes one)")
	one := fs.Bool("one", false, "only the agent at --addr, not every member it knows")
	if err := noArgs(fs, args[1:]); err != nil {
		return err
	}
	if op == "list" && *key != "" {
		return errors.New("keyring list takes no --key")
	}
	if op != "list" {
		if _, err := cluster.ParseGossipKey(*key); err != nil {
			return fmt.Errorf("keyring %s: --key: %v", op, err)
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	targets := []*client.Client{c}
	if !*one {
		if targets, err = memberClients(ctx, c, cf); err != nil {
			return err
		}
	}
	var results []apitypes.Keyring
	var errs []error
	for _, t := range targets {
		var kr apitypes.Keyring
		var err error
		if op == "list" {
			kr, err = t.Keyring(ctx)
		} else {
			kr, err = t.KeyringOp(ctx, op, *key)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.Addr(), explain(t, err)))
			continue
		}
		results = append(results, kr)
	}
	if cf.json {
		if err := m.print(cf, results, nil); err != nil {
			return err
		}
	} else {
		keyringTable(m.Stdout, results)
	}
	if len(errs) > 0 {
		return fmt.Errorf("keyring %s: %d of %d agents failed (run it again: every step is idempotent except removing the primary): %w",
			op, len(errs), len(targets), errors.Join(errs...))
	}
	return nil
}

// memberClients returns a client for every member c's agent lists with an
// HTTP address, with c's token and TLS settings.
func memberClients(ctx context.Context, c *client.Client, cf *clientFlags) ([]*client.Client, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("keyring: list members: %w", explain(c, err))
	}
	var out []*client.Client
	var missing []string
	for _, mb := range members {
		if mb.HTTPAddr == "" {
			missing = append(missing, mb.ID)
			continue
		}
		mcf := *cf
		mcf.addr = mb.HTTPAddr
		mc, err := mcf.client()
		if err != nil {
			return nil, err
		}
		out = append(out, mc)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("keyring: members %v gossip no HTTP address: rotate them with --one --addr", missing)
	}
	return out, nil
}

func keyringTable(w io.Writer, rs []apitypes.Keyring) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKEY\tPRIMARY")
	for _, r := range rs {
		for _, k := range r.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%t\n", r.Node, k.Fingerprint, k.Primary)
		}
	}
	_ = tw.Flush()
}
