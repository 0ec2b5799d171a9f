package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenurehq/tenure/certs"
)

// `tenure tls` writes the certificates mutual TLS on the Raft/RPC port
// needs, as `consul tls ca create` / `cert create` do.

const (
	tlsCADays   = 3650
	tlsCertDays = 825
)

func init() {
	register("tls", "create a cluster CA and node/member/operator certificates (init, cert)", runTLS)
}

func runTLS(_ context.Context, m *Main, args []string) error {
	const usage = "tls init --dir DIR --nodes n1,n2,n3 [--cluster NAME] [--hosts h1,h2] [--force|--keep]\n" +
		"       tenure tls cert --dir DIR --node NAME [--ca-dir DIR] [--member|--operator] [--hosts h1,h2] [--force]"
	valid := func(a string) bool { return a == "init" || a == "cert" }
	sub, done, err := m.subcommand(args, usage, valid, errors.New("tls: want a subcommand: init or cert"))
	if done {
		return err
	}
	fset := flag.NewFlagSet("tls "+sub, flag.ContinueOnError)
	fset.SetOutput(m.Stderr)
	dir := fset.String("dir", "", "directory for the CA and certificates")
	var nodes, hosts []string
	fset.Var(listValue{&hosts}, "hosts", "extra DNS names or IPs for node certificates")
	force := fset.Bool("force", false, "overwrite existing files")
	keep := false
	days := fset.Int("cert-days", tlsCertDays, "validity of issued certificates in days")
	cluster := "tenure"
	var node, caDir *string
	var operator, member *bool
	if sub == "init" {
		fset.Var(listValue{&nodes}, "nodes", "comma-separated node ids to issue certificates for")
		fset.StringVar(&cluster, "cluster", cluster, "cluster name in the CA's subject")
		fset.BoolVar(&keep, "keep", false, "keep the files that exist and issue only the missing ones from the existing CA (idempotent: for init containers)")
	} else {
		node = fset.String("node", "", "node id (or operator name with --operator)")
		caDir = fset.String("ca-dir", "", "directory holding ca.pem and ca-key.pem (default --dir): a read-only mount of the CA, e.g. a Kubernetes Secret in an init container")
		operator = fset.Bool("operator", false, "issue an operator (client) certificate")
		member = fset.Bool("member", false, "issue a member certificate (tenure://member/NAME) for a --voter=never node: "+
			"it serves renewals, proposals and the state stream but can never speak Raft (without it: a voter-capable node certificate)")
	}
	if err := parseFlags(fset, args[1:]); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("tls %s: unexpected arguments %q", sub, strings.Join(fset.Args(), " "))
	}
	if *dir == "" {
		return fmt.Errorf("tls %s: --dir is required", sub)
	}
	if *days < 1 || *days > 100*365 {
		return fmt.Errorf("tls %s: --cert-days %d: want 1..36500", sub, *days)
	}
	validFor := time.Duration(*days) * 24 * time.Hour
	cad := *dir
	if caDir != nil && *caDir != "" {
		cad = *caDir
	}
	caCert, caKey := filepath.Join(cad, "ca.pem"), filepath.Join(cad, "ca-key.pem")
	var ids []certs.Identity
	if sub == "init" {
		if len(nodes) == 0 {
			return errors.New("tls init: --nodes is required (e.g. --nodes n1,n2,n3)")
		}
		for _, n := range nodes {
			ids = append(ids, certs.Identity{Name: n, Role: certs.RoleNode})
		}
		ids = append(ids, certs.Identity{Name: "operator", Role: certs.RoleOperator})
		var files []string
		for _, id := range ids {
			files = append(files, certPath(*dir, id), keyPath(*dir, id))
		}
		if keep && *force {
			return errors.New("tls init: --keep and --force exclude each other")
		}
		newCA := true
		if keep {
			newCA = !exists(caCert) || !exists(caKey)
			missing := ids[:0:0]
			for _, id := range ids {
				if newCA || !exists(certPath(*dir, id)) || !exists(keyPath(*dir, id)) {
					missing = append(missing, id)
				}
			}
			ids = missing
			if len(ids) == 0 {
				fmt.Fprintf(m.Stdout, "tls init: every file in %s exists; nothing to do\n", *dir)
				return nil
			}
		} else if err := refuseOverwrite(append([]string{caCert, caKey}, files...), *force); err != nil {
			return err
		}
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return fmt.Errorf("tls init: %w", err)
		}
		if newCA {
			c, k, err := certs.NewCA(cluster, tlsCADays*24*time.Hour)
			if err != nil {
				return err
			}
			if err := writeFiles(m, caCert, c, caKey, k); err != nil {
				return err
			}
		}
	} else {
		role := certs.RoleNode
		switch {
		case *operator && *member:
			return errors.New("tls cert: --member and --operator exclude each other")
		case *operator:
			role = certs.RoleOperator
		case *member:
			role = certs.RoleMember
		}
		ids = []certs.Identity{{Name: *node, Role: role}}
		if err := refuseOverwrite([]string{certPath(*dir, ids[0]), keyPath(*dir, ids[0])}, *force); err != nil {
			return err
		}
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return fmt.Errorf("tls cert: %w", err)
		}
	}
	cb, err := os.ReadFile(caCert)
	if err != nil {
		return fmt.Errorf("tls %s: CA certificate: %w", sub, err)
	}
	kb, err := os.ReadFile(caKey)
	if err != nil {
		return fmt.Errorf("tls %s: CA key: %w", sub, err)
	}
	for _, id := range ids {
		h := append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
		if id.Role == certs.RoleNode || id.Role == certs.RoleMember {
			h = append(h, id.Name)
		}
		c, k, err := certs.Issue(cb, kb, id, h, validFor)
		if err != nil {
			return fmt.Errorf("tls %s: %s: %w", sub, id.Name, err)
		}
		if err := writeFiles(m, certPath(*dir, id), c, keyPath(*dir, id), k); err != nil {
			return err
		}
		switch id.Role {
		case certs.RoleNode:
			fmt.Fprintf(m.Stdout, "  %s: --tls-ca %s --tls-cert %s --tls-key %s\n", id.Name, caCert, certPath(*dir, id), keyPath(*dir, id))
		case certs.RoleMember:
			fmt.Fprintf(m.Stdout, "  %s (member): --voter=never --tls-ca %s --tls-cert %s --tls-key %s\n", id.Name, caCert, certPath(*dir, id), keyPath(*dir, id))
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func certPath(dir string, id certs.Identity) string { return filepath.Join(dir, id.Name+".pem") }
func keyPath(dir string, id certs.Identity) string  { return filepath.Join(dir, id.Name+"-key.pem") }

func refuseOverwrite(files []string, force bool) error {
	if force {
		return nil
	}
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("tls: %s exists (use --force to overwrite)", f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tls: %w", err)
		}
	}
	return nil
}

func writeFiles(m *Main, certFile string, cert []byte, keyFile string, key []byte) error {
	if err := os.WriteFile(certFile, cert, 0o644); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	fmt.Fprintf(m.Stdout, "wrote %s and %s\n", certFile, keyFile)
	return nil
}
