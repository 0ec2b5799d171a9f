package httpapi_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSpeaksOnlyNode: httpapi reaches the cluster through node's API only
// (issue 27): its non-test files import no other tenure package than node
// and its own subpackages. A limit or helper an embedder needs is
// re-exported by node (node.MaxStringLen, node.ParseGossipKey, ...).
func TestSpeaksOnlyNode(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/tenurehq/tenure/"
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, mod) || p == mod+"node" || strings.HasPrefix(p, mod+"httpapi/") {
				continue
			}
			t.Errorf("%s imports %s: httpapi speaks only node's API (re-export what it needs from node)", f, p)
		}
	}
}
