package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/certs"
)

// tls init writes a CA and certificates that load with the right
// identities, refuses to overwrite, and tls cert adds one.
func TestTLSCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb}
	ctx := context.Background()
	if err := m.Run(ctx, []string{"tls", "init", "--dir", dir, "--nodes", "n1,n2"}); err != nil {
		t.Fatalf("init: %v\n%s", err, errb.String())
	}
	for _, id := range []certs.Identity{{Name: "n1", Role: certs.RoleNode}, {Name: "n2", Role: certs.RoleNode}, {Name: "operator", Role: certs.RoleOperator}} {
		st, err := os.Stat(filepath.Join(dir, id.Name+"-key.pem"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s key: %v %v", id.Name, st, err)
		}
		r, err := certs.NewReloader(certs.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, id.Name+".pem"), Key: filepath.Join(dir, id.Name+"-key.pem")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Identity(); got != id {
			t.Errorf("identity %+v, want %+v", got, id)
		}
	}
	if err := m.Run(ctx, []string{"tls", "init", "--dir", dir, "--nodes", "n1"}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second init: %v, want refusal to overwrite", err)
	}
	if err := m.Run(ctx, []string{"tls", "cert", "--dir", dir, "--node", "n3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "n3.pem")); err != nil {
		t.Fatal(err)
	}
	// --keep: nothing changes when every file exists; a missing node
	// certificate is issued from the existing CA.
	caBefore, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	n1Before, _ := os.ReadFile(filepath.Join(dir, "n1.pem"))
	if err := m.Run(ctx, []string{"tls", "init", "--dir", dir, "--nodes", "n1,n2,n4", "--keep"}); err != nil {
		t.Fatalf("init --keep: %v", err)
	}
	caAfter, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	n1After, _ := os.ReadFile(filepath.Join(dir, "n1.pem"))
	if !bytes.Equal(caBefore, caAfter) || !bytes.Equal(n1Before, n1After) {
		t.Error("init --keep rewrote the CA or an existing certificate")
	}
	if _, err := certs.NewReloader(certs.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "n4.pem"), Key: filepath.Join(dir, "n4-key.pem")}, nil); err != nil {
		t.Errorf("n4 issued by init --keep does not load against the existing CA: %v", err)
	}
	// --ca-dir: the CA read from another (read-only) directory, the
	// certificate written to --dir (a Kubernetes init container).
	podDir := filepath.Join(t.TempDir(), "pod")
	if err := m.Run(ctx, []string{"tls", "cert", "--dir", podDir, "--ca-dir", dir, "--node", "member-x"}); err != nil {
		t.Fatalf("cert --ca-dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(podDir, "ca-key.pem")); err == nil {
		t.Error("cert --ca-dir copied the CA key into --dir")
	}
	r, err := certs.NewReloader(certs.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(podDir, "member-x.pem"), Key: filepath.Join(podDir, "member-x-key.pem")}, nil)
	if err != nil || r.Identity() != (certs.Identity{Name: "member-x", Role: certs.RoleNode}) {
		t.Fatalf("member-x from --ca-dir: %v", err)
	}
	// --member: a member certificate, the role in its URI SAN.
	if err := m.Run(ctx, []string{"tls", "cert", "--dir", podDir, "--ca-dir", dir, "--node", "m7", "--member"}); err != nil {
		t.Fatalf("cert --member: %v", err)
	}
	r, err = certs.NewReloader(certs.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(podDir, "m7.pem"), Key: filepath.Join(podDir, "m7-key.pem")}, nil)
	if err != nil || r.Identity() != (certs.Identity{Name: "m7", Role: certs.RoleMember}) {
		t.Fatalf("m7 --member: %+v %v", r, err)
	}
	if !strings.Contains(out.String(), "m7 (member): --voter=never") {
		t.Errorf("cert --member did not print the member's flags:\n%s", out.String())
	}
	if err := m.Run(ctx, []string{"tls", "cert", "--dir", podDir, "--node", "m8", "--member", "--operator"}); err == nil {
		t.Error("cert --member --operator: no error")
	}
	if err := m.Run(ctx, []string{"tls", "cert", "--dir", podDir, "--ca-dir", filepath.Join(t.TempDir(), "none"), "--node", "y"}); err == nil {
		t.Error("cert with an empty --ca-dir: no error")
	}
	for _, bad := range [][]string{{"tls"}, {"tls", "init"}, {"tls", "init", "--dir", dir, "--nodes", "n1", "--keep", "--force"}, {"tls", "init", "--dir", dir}, {"tls", "cert", "--dir", dir, "--node", "a b"}} {
		if err := m.Run(ctx, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
