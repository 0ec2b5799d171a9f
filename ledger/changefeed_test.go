package ledger

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// feedView is a reader of the change feed: what node's refresh keeps, one
// entry per shard, updated from ShardChangesSince.
type feedView struct {
	gen   uint64
	recs  map[uint32]feedRec
	incr  int // syncs served from the feed
	full  int // syncs that re-read every shard
	shard int // shards re-checked incrementally
}

type feedRec struct {
	rec   ShardRecord
	valid bool
}

func fullView(st *State) map[uint32]feedRec {
	out := map[uint32]feedRec{}
	st.EachShard(func(r ShardRecord) bool {
		out[r.Shard] = feedRec{r, st.OwnershipValid(r)}
		return true
	})
	return out
}

func (v *feedView) sync(st *State) {
	changed, ok := st.ShardChangesSince(v.gen)
	if !ok || v.recs == nil {
		v.recs, v.gen = fullView(st), st.OwnershipGeneration()
		v.full++
		return
	}
	for _, s := range changed {
		r, found := st.Shard(s)
		if !found {
			delete(v.recs, s)
			continue
		}
		v.recs[s] = feedRec{r, st.OwnershipValid(r)}
	}
	v.gen = st.OwnershipGeneration()
	v.incr++
	v.shard += len(changed)
}

// feedGen draws ownership commands against the FSM's current state,
// biased towards accepted ones: registrations and restarts, expiries,
// grants, revocations, releases, transfers, forgets, batches of them.
type feedGen struct {
	r   *rand.Rand
	now int64
}

var feedNodes = []string{"a", "b", "c", "d", "e"}

const feedShards = 48

func (g *feedGen) one(st *State, index uint64) Command {
	g.now += int64(g.r.IntN(1000))
	node := feedNodes[g.r.IntN(len(feedNodes))]
	n, known := st.Node(node)
	shard := uint32(g.r.IntN(feedShards))
	rec, _ := st.Shard(shard)
	switch k := g.r.IntN(20); {
	case k < 2: // register, renew or restart
		inc := n.Incarnation
		if !known || g.r.IntN(3) == 0 {
			inc++
		}
		return Heartbeat{Node: node, Incarnation: inc, Liveness: n.Liveness, Now: g.now}
	case k < 4:
		return ExpireNode{Node: node, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq}
	case k < 5 && g.r.IntN(4) == 0:
		return ForgetNode{Node: node, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq}
	case k < 10:
		return Grant{Shard: shard, ExpectedEpoch: rec.Epoch, Owner: node, OwnerIncarnation: n.Incarnation, OwnerLiveness: n.Liveness,
			Now: g.now, Takeover: g.r.IntN(3) == 0}
	case k < 13:
		return Revoke{Shard: shard, Epoch: rec.Epoch, Target: node, Now: g.now}
	case k < 16:
		return Release{Shard: shard, Epoch: rec.Epoch, Owner: rec.Owner, Now: g.now, Avoid: g.r.IntN(2) == 0}
	default:
		return Transfer{Shard: shard, Epoch: rec.Epoch, From: rec.Owner, To: node, ToIncarnation: n.Incarnation,
			ToLiveness: n.Liveness, Now: g.now}
	}
}

func (g *feedGen) command(st *State, index uint64) Command {
	if g.r.IntN(8) != 0 {
		return g.one(st, index)
	}
	b := Batch{}
	for range 1 + g.r.IntN(6) {
		b.Commands = append(b.Commands, g.one(st, index))
	}
	return b
}

// TestChangeFeedEqualsFullPass: a reader that re-checks only the shards
// ShardChangesSince names (and re-reads every shard when it says it cannot
// tell) always holds what a full pass over the table reads — records and
// ownership validity — across random ownership commands, node expiries,
// restarts and forgets, readers that fall behind the bounded feed, and
// snapshot restores. The seed of a failure is printed; replay one with
// TENURE_FEED_SEED.
func TestChangeFeedEqualsFullPass(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, uint64(time.Now().UnixNano())}
	if s := testSeedEnv(); s != 0 {
		seeds = []uint64{s}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if err := runFeedSeed(seed, 3000); err != nil {
				t.Fatalf("seed %d (TENURE_FEED_SEED=%d): %v", seed, seed, err)
			}
		})
	}
}

func runFeedSeed(seed uint64, steps int) error {
	cfg := DefaultConfig()
	f, err := NewFSM(cfg)
	if err != nil {
		return err
	}
	g := &feedGen{r: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), now: 1}
	readers := []*feedView{{}, {}, {}}
	// Each reader syncs at its own pace: every entry, every few, and
	// rarely (falling behind the bounded feed).
	every := []int{1, 7, maxFeedLinks + 100}
	index := uint64(0)
	for step := 1; step <= steps; step++ {
		index++
		c := g.command(f.State(), index)
		f.ApplyCommand(index, c)
		if g.r.IntN(500) == 0 { // a snapshot restore: every reader starts over
			f, err = restoreCopy(f, cfg)
			if err != nil {
				return err
			}
		}
		st := f.State()
		for i, v := range readers {
			if step%every[i] != 0 && g.r.IntN(50) != 0 {
				continue
			}
			v.sync(st)
			want := fullView(st)
			for s, w := range want {
				if got, ok := v.recs[s]; !ok || got != w {
					return fmt.Errorf("step %d (%s), reader %d: shard %d incrementally %+v (present %v), full pass %+v",
						step, FormatCommand(c), i, s, got, ok, w)
				}
			}
			if len(v.recs) != len(want) {
				return fmt.Errorf("step %d, reader %d: %d shards incrementally, %d in a full pass", step, i, len(v.recs), len(want))
			}
		}
	}
	if readers[0].incr < steps/2 || readers[0].shard >= readers[0].incr*feedShards/2 {
		return fmt.Errorf("the feed served %d of %d syncs of the every-entry reader (%d shards re-checked): not incremental",
			readers[0].incr, steps, readers[0].shard)
	}
	return nil
}

// restoreCopy snapshots f into a new FSM, as a replica installing a
// snapshot does.
func restoreCopy(f *FSM, cfg Config) (*FSM, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	sink := &memSink{Buffer: &buf}
	if err := snap.Persist(sink); err != nil {
		return nil, err
	}
	g, err := NewFSM(cfg)
	if err != nil {
		return nil, err
	}
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		return nil, err
	}
	return g, nil
}

type memSink struct{ *bytes.Buffer }

func (memSink) ID() string    { return "feed" }
func (memSink) Cancel() error { return nil }
func (memSink) Close() error  { return nil }

var _ raft.SnapshotSink = memSink{}

// TestChangeFeedNamesOwnersShards: an expiry changes no shard record but
// every shard of the expired node loses its valid owner; the feed names
// exactly those (the rule mutation.FeedSkipsOwners breaks).
func TestChangeFeedNamesOwnersShards(t *testing.T) {
	f, err := NewFSM(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	apply := func(c Command) Result {
		idx++
		r := f.ApplyCommand(idx, c)
		if r.Err != nil {
			t.Fatalf("%s: %v", FormatCommand(c), r.Err)
		}
		return r
	}
	apply(Heartbeat{Node: "a", Incarnation: 1, Now: 1})
	apply(Heartbeat{Node: "b", Incarnation: 1, Now: 1})
	for s := range uint32(6) {
		owner := "a"
		if s%2 == 1 {
			owner = "b"
		}
		apply(Grant{Shard: s, Owner: owner, OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
	}
	before := f.State().OwnershipGeneration()
	n, _ := f.State().Node("a")
	apply(ExpireNode{Node: "a", Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq})
	got, ok := f.State().ShardChangesSince(before)
	if want := []uint32{0, 2, 4}; !ok || !slices.Equal(got, want) {
		t.Fatalf("after expiring a: changes %v (ok %v), want %v", got, ok, want)
	}
	// A renewal heartbeat changes no validity: no generation, no change.
	mid := f.State().OwnershipGeneration()
	apply(Heartbeat{Node: "b", Incarnation: 1, Liveness: 1, Now: 3})
	if g := f.State().OwnershipGeneration(); g != mid {
		t.Fatalf("a renewal moved the generation %d -> %d", mid, g)
	}
	got, ok = f.State().ShardChangesSince(before)
	if !ok || !slices.Equal(got, []uint32{0, 2, 4}) {
		t.Fatalf("changes since before the expiry: %v (ok %v)", got, ok)
	}
	if _, ok := f.State().ShardChangesSince(before - 1000); ok {
		t.Fatal("a generation the feed never held was answered")
	}
}

// testSeedEnv is TENURE_FEED_SEED (0: unset).
func testSeedEnv() uint64 {
	var s uint64
	_, _ = fmt.Sscan(os.Getenv("TENURE_FEED_SEED"), &s)
	return s
}

// TestShardChangesSinceAfterRestoreIntoSameFSM: a replica installing a
// newer snapshot restores into its own FSM (the member stream, a
// follower's InstallSnapshot), whose earlier states a reader has seen. The
// feed must then say it cannot tell, so the reader re-reads every shard:
// a reader answered "nothing changed since" would keep shard records the
// snapshot replaced (an agent acting on a shard the snapshot shows moved).
func TestShardChangesSinceAfterRestoreIntoSameFSM(t *testing.T) {
	cfg := DefaultConfig()
	f, err := NewFSM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	idx := uint64(0)
	apply := func(f *FSM, c Command) {
		t.Helper()
		idx++
		if r := f.ApplyCommand(idx, c); r.Err != nil {
			t.Fatalf("%s: %v", FormatCommand(c), r.Err)
		}
	}
	apply(f, Heartbeat{Node: "a", Incarnation: 1, Now: 1})
	apply(f, Heartbeat{Node: "b", Incarnation: 1, Now: 1})
	for s := range uint32(4) {
		apply(f, Grant{Shard: s, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 2})
	}
	var reader feedView
	reader.sync(f.State())
	seen := f.State()

	// A newer state built elsewhere: shard 1 moved to b, shard 5 granted.
	g, err := restoreCopy(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	apply(g, Transfer{Shard: 1, Epoch: 1, From: "a", To: "b", ToIncarnation: 1, ToLiveness: 1, Now: 3})
	apply(g, Grant{Shard: 5, Owner: "b", OwnerIncarnation: 1, OwnerLiveness: 1, Now: 3})
	snap, err := g.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	st := f.State()
	if changed, ok := st.ShardChangesSince(seen.OwnershipGeneration()); ok {
		t.Fatalf("after restoring a newer snapshot into the same FSM, ShardChangesSince(%d) = %v, true; want false (re-read every shard)",
			seen.OwnershipGeneration(), changed)
	}
	reader.sync(st)
	want := fullView(st)
	if len(reader.recs) != len(want) {
		t.Fatalf("reader holds %d shards after the restore, a full pass %d", len(reader.recs), len(want))
	}
	for s, w := range want {
		if got := reader.recs[s]; got != w {
			t.Fatalf("shard %d: reader %+v, full pass %+v", s, got, w)
		}
	}
	if r, _ := st.Shard(1); r.Owner != "b" {
		t.Fatalf("shard 1 after the restore: owner %q, want b (the snapshot's)", r.Owner)
	}
}
