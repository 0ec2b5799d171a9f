package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Every request reaches its key's owner, whichever node it was sent to:
// each key is served by one node under one token, and its counter counts
// every request (a request served elsewhere would restart it).
func TestRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	const keys, rounds = 6, 4
	answers, err := run(ctx, &out, keys, rounds)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(answers) != keys*(rounds+1) {
		t.Fatalf("%d answers, want %d", len(answers), keys*(rounds+1))
	}
	type served struct{ node, token string }
	by := map[string]served{}
	count := map[string]int{}
	for _, a := range answers {
		count[a.Key]++
		if a.Count != count[a.Key] {
			t.Errorf("%s: count %d on the %d-th request: a request missed the owner", a.Key, a.Count, count[a.Key])
		}
		s := served{a.Node, a.Token}
		if prev, ok := by[a.Key]; ok && prev != s {
			t.Errorf("%s served by %v and by %v", a.Key, prev, s)
		}
		by[a.Key] = s
	}
	nodes := map[string]bool{}
	for _, s := range by {
		nodes[s.node] = true
	}
	if len(nodes) < 2 {
		t.Errorf("every key served by %v: the test routes nothing", nodes)
	}
}
