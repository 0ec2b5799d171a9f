package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// TestDocsIndexLinksEveryPage checks that docs/index.md links every page of
// docs/ and that every page it links exists.
func TestDocsIndexLinksEveryPage(t *testing.T) {
	const dir = "../../docs"
	index, err := os.ReadFile(filepath.Join(dir, "index.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\(([A-Za-z0-9._-]+\.md)(#[^)]*)?\)`).FindAllSubmatch(index, -1) {
		linked[string(m[1])] = true
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, p := range pages {
		name := filepath.Base(p)
		if name != "index.md" && !linked[name] {
			missing = append(missing, name)
		}
		delete(linked, name)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/index.md does not link %v", missing)
	}
	for name := range linked {
		t.Errorf("docs/index.md links %s, which does not exist", name)
	}
}
