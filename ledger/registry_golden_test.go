package ledger

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewriteKinds = flag.Bool("rewrite-kinds", false, "rewrite testdata/kinds.golden")

// goldenCommands are sampleCommands plus the kinds and field versions
// they leave out.
func goldenCommands() []Command {
	return append(sampleCommands(),
		ClusterConfig{Name: "prod", Partitions: 271, Version: 4, Now: 19},
		ForgetNode{Node: "n4", Incarnation: 2, Liveness: 3, Seq: 4, Now: 20},
		JobEnqueue{Shard: 3, Key: "k", Type: "t", Payload: []byte("p"), MaxAttempts: 2, Now: 21, MaxPending: 100},
		Session{ID: RequestID{9}, Command: ForgetNode{Node: "n5", Now: 22}},
		Session{ID: RequestID{10}, Command: Grant{Shard: 4, Owner: "n1", Now: 23}},
	)
}

// TestKindsGolden pins, for one command of every kind, everything the
// per-kind declarations decide: the wire bytes (log entries written by
// earlier releases must keep decoding to the same command, and this
// release must keep writing the bytes the previous release reads), the
// session's clock and shard, who may propose it and the request digest.
// Rewrite with `go test ./ledger -run TestKindsGolden -args -rewrite-kinds`
// only for a deliberate, version-gated change.
func TestKindsGolden(t *testing.T) {
	var sb strings.Builder
	for _, c := range goldenCommands() {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("encode %#v: %v", c, err)
		}
		inner := Unwrap(c)
		who, _ := WhoMayPropose(KindOf(c))
		nodes, shards := Touched(c)
		fmt.Fprintf(&sb, "%s\n  wire %s\n  now %d shard %d digest %x\n  who %s\n  format %s\n  touches nodes %q shards %v\n",
			KindOf(c), hex.EncodeToString(b), commandNow(inner), commandShard(inner), RequestDigest(inner), who,
			FormatCommand(c), nodes, shards)
	}
	path := filepath.Join("testdata", "kinds.golden")
	if *rewriteKinds {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.String(); got != string(want) {
		t.Errorf("kinds changed (rewrite with -rewrite-kinds only for a gated change):\n got:\n%s\nwant:\n%s", got, want)
	}
}
