package cluster

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// The renewal's read-back must not write into the leader's log cache:
// entry 3 is a no-op held by the LogCache, entry 2 a no-op only on disk,
// entry 1 the last command. Reading 3 then 2 into one raft.Log made
// raft-boltdb decode entry 2's bytes into the cached entry 3's Data.
func TestLastCommandIndexLeavesCacheAlone(t *testing.T) {
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(t.TempDir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	if err := bolt.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("cmd")},
		{Index: 2, Term: 1, Type: raft.LogNoop, Data: []byte("two!")},
	}); err != nil {
		t.Fatal(err)
	}
	cache, err := raft.NewLogCache(1, bolt)
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.StoreLog(&raft.Log{Index: 3, Term: 1, Type: raft.LogNoop, Data: []byte("three")}); err != nil {
		t.Fatal(err)
	}
	if got := lastCommandIndex(cache, 3); got != 1 {
		t.Errorf("lastCommandIndex = %d, want 1 (the last command)", got)
	}
	var l raft.Log
	if err := cache.GetLog(3, &l); err != nil {
		t.Fatal(err)
	}
	if string(l.Data) != "three" {
		t.Fatalf("the cached entry 3 now holds %q, want %q: the read-back wrote into the log cache", l.Data, "three")
	}
}
