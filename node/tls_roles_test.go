package node

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/cluster"
)

// A member certificate starts only a --voter=never node; a node
// certificate starts any; someone else's certificate none. Every refusal
// says what to do.
func TestOwnCertificateRole(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    certs.Identity
		voter VoterPreference
		want  string // "" starts
	}{
		{"node certificate, auto", certs.Identity{Name: "n1", Role: certs.RoleNode}, "", ""},
		{"node certificate, always", certs.Identity{Name: "n1", Role: certs.RoleNode}, VoterAlways, ""},
		{"node certificate, never (a member before version 5)", certs.Identity{Name: "n1", Role: certs.RoleNode}, VoterNever, ""},
		{"member certificate, never", certs.Identity{Name: "n1", Role: certs.RoleMember}, VoterNever, ""},
		{"member certificate, auto", certs.Identity{Name: "n1", Role: certs.RoleMember}, "", `member certificate (tenure://member/n1), which cannot speak Raft, but this node runs with Voter "auto": run a member with --voter=never`},
		{"member certificate, always", certs.Identity{Name: "n1", Role: certs.RoleMember}, VoterAlways, `runs with Voter "always"`},
		{"another node's certificate", certs.Identity{Name: "n2", Role: certs.RoleNode}, "", `is for node "n2", but this node is "n1"`},
		{"another member's certificate", certs.Identity{Name: "n2", Role: certs.RoleMember}, VoterNever, `is for member "n2"`},
		{"operator certificate", certs.Identity{Name: "n1", Role: certs.RoleOperator}, VoterNever, "is for operator"},
	} {
		cfg := Config{NodeID: "n1", Voter: tc.voter, TLSCertFile: "/tls/n1.pem"}
		err := checkOwnCertificate(tc.id, cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

// Every certificate role maps to its control-group role.
func TestPeerRoles(t *testing.T) {
	for _, r := range []certs.Role{certs.RoleNode, certs.RoleMember, certs.RoleOperator} {
		if got, ok := peerRoles[r]; !ok || got == cluster.RoleNone || got.String() != string(r) {
			t.Errorf("pki role %q maps to %v (%v)", r, got, ok)
		}
	}
}
