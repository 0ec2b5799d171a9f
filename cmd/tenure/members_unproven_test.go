package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// TestMemberTableShowsUnproven: `tenure members` marks a member that has
// not proven its id at its Raft address (docs/security.md).
func TestMemberTableShowsUnproven(t *testing.T) {
	var b bytes.Buffer
	memberTable(&b, []apitypes.Member{
		{ID: "n1", State: "alive", Health: 1},
		{ID: "n2", State: "alive", Health: 1, Unproven: true},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[2], "n2\talive/unproven\t") || strings.Contains(lines[1], "unproven") {
		t.Fatalf("table:\n%s", b.String())
	}
}
