package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestDigest: replicas that applied the same entries agree on the digest at
// an index; one that missed an entry does not; a digest cannot be asked for
// an index already applied.
func TestDigest(t *testing.T) {
	entries := []Command{
		Heartbeat{Node: "a", Incarnation: 1, Now: 1},
		Heartbeat{Node: "b", Incarnation: 1, Now: 2},
		Grant{Shard: 1, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 3},
		JobEnqueue{Shard: 1, Key: "k", Type: "t", Now: 4},
	}
	replica := func(skip int) *FSM {
		f, err := NewFSM(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.RequestDigest(4); err != nil {
			t.Fatal(err)
		}
		for i, c := range entries {
			l := &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: MustEncode(c)}
			if i == skip {
				l = &raft.Log{Index: uint64(i + 1), Type: raft.LogNoop}
			}
			f.ApplyBatch([]*raft.Log{l})
		}
		return f
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, b, c := replica(-1), replica(-1), replica(1)
	da, err := a.Digest(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if db, _ := b.Digest(ctx, 4); db != da {
		t.Errorf("two replicas of the same log disagree: %x vs %x", da, db)
	}
	if dc, _ := c.Digest(ctx, 4); dc == da {
		t.Errorf("a replica that missed entry 2 has the same digest %x", dc)
	}
	if err := a.RequestDigest(2); !errors.Is(err, ErrInvalid) {
		t.Errorf("digest at an applied index: %v, want ErrInvalid", err)
	}
	if _, err := a.Digest(ctx, 9); !errors.Is(err, ErrInvalid) {
		t.Errorf("digest never requested: %v, want ErrInvalid", err)
	}
}
