package ledger

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"
)

func propConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxPayload = 64
	cfg.MaxFinishedJobs = 4
	cfg.JobRetention = 3000
	cfg.DefaultMaxAttempts = 2
	return cfg
}

func newTestFSM(t interface{ Fatal(...any) }, cfg Config) (*FSM, *counterSM) {
	f, err := NewFSM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sm := newCounterSM()
	if err := f.RegisterStateMachine("counter", sm); err != nil {
		t.Fatal(err)
	}
	return f, sm
}

// gen draws commands from a seeded PCG (rapid draws the seed and the
// number of steps; rapid's own small-value bias would starve the accepted
// paths). Choices are biased by the model's state towards accepted commands.
type gen struct {
	r   *rand.Rand
	now int64
}

func newGen(seed uint64) *gen { return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

func (g *gen) n(k int) int { return g.r.IntN(k) }

func pickOf[T any](g *gen, xs ...T) T { return xs[g.n(len(xs))] }

// rarelyNeg returns -1 about one time in 20, else a value in [0, hi).
func (g *gen) rarelyNeg(hi int) int64 {
	if g.n(20) == 0 {
		return -1
	}
	return int64(g.n(hi))
}

// near returns cur most of the time, else cur±1.
func (g *gen) near(cur uint64) uint64 {
	switch g.n(10) {
	case 0:
		if cur > 0 {
			return cur - 1
		}
	case 1:
		return cur + 1
	}
	return cur
}

func (g *gen) command(m *model) Command {
	g.now += int64(g.n(400))
	now := g.now
	node := pickOf(g, "a", "b", "c")
	shard := uint32(g.n(4))
	n := m.nodes[node]
	s := m.shard(shard)
	// Weighted so that job transitions on validly owned shards are common.
	kinds := []int{0, 0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 10, 10, 11, 11, 12, 13}
	kind := pickOf(g, kinds...)
	ids := m.sortedJobIDs()
	if kind == 9 || kind == 10 || kind == 8 {
		// Prefer jobs whose shard has a valid owner (and, to finish, started ones).
		var better []uint64
		for _, id := range ids {
			j := m.jobs[id]
			if m.valid(m.shard(j.Shard)) && (kind == 8 || j.State == JobStarted) {
				better = append(better, id)
			}
		}
		if len(better) > 0 && g.n(4) != 0 {
			ids = better
		}
	}
	var job JobRecord
	if len(ids) > 0 && g.n(5) != 0 {
		job = m.jobs[pickOf(g, ids...)]
		shard = job.Shard
		s = m.shard(shard)
	} else {
		job.ID = uint64(1 + g.n(12))
	}
	payload := []byte(pickOf(g, "", "x", "y", "fail", "", "x", "y", "z", string(make([]byte, 65))))
	if len(payload) == 0 {
		payload = nil
	}
	inc := n.Incarnation
	if g.n(16) == 0 {
		inc = g.near(inc)
	}
	switch kind {
	case 0:
		live := g.near(n.Liveness)
		if g.n(4) == 0 {
			live = 0
		}
		return Heartbeat{Node: node, Incarnation: inc, Liveness: live, Now: now}
	case 1:
		return ExpireNode{Node: node, Incarnation: n.Incarnation, Liveness: g.near(n.Liveness), Seq: g.near(n.Seq), Now: now}
	case 2:
		return SetDraining{Node: node, Incarnation: inc, Draining: g.n(2) == 0, Now: now}
	case 3:
		return Grant{Shard: shard, ExpectedEpoch: g.near(s.Epoch), Owner: node, OwnerIncarnation: inc,
			OwnerLiveness: g.near(n.Liveness), Takeover: g.n(2) == 0, Now: now, Reason: "r"}
	case 4:
		return Revoke{Shard: shard, Epoch: g.near(s.Epoch), Target: node, Now: now}
	case 5:
		return Release{Shard: shard, Epoch: g.near(s.Epoch), Owner: pickOf(g, s.Owner, s.Owner, node), Now: now,
			Avoid: pickOf(g, false, true)}
	case 6:
		return Transfer{Shard: shard, Epoch: g.near(s.Epoch), From: pickOf(g, s.Owner, s.Owner, node), To: node, ToIncarnation: inc,
			ToLiveness: g.near(n.Liveness), Now: now}
	case 7:
		return JobEnqueue{Shard: shard, Key: pickOf(g, "", "k1", "k2"), Type: "t",
			Payload: payload, MaxAttempts: uint32(g.n(4)), Now: now, MaxPending: pickOf[uint32](g, 0, 0, 1, 2, 3)}
	case 8:
		return JobStart{Shard: shard, Epoch: g.near(s.Epoch), Owner: pickOf(g, s.Owner, s.Owner, s.Owner, node), Job: job.ID,
			Attempt: uint32(g.near(uint64(job.Attempt))), Timeout: g.rarelyNeg(600), Now: now}
	case 9:
		return JobComplete{Shard: shard, Epoch: g.near(s.Epoch), Job: job.ID,
			Attempt: uint32(g.near(uint64(job.Attempt))), Result: payload, Now: now}
	case 10:
		return JobFail{Shard: shard, Epoch: g.near(s.Epoch), Job: job.ID,
			Attempt: uint32(g.near(uint64(job.Attempt))), Error: "e", Backoff: g.rarelyNeg(500), Now: now}
	case 11:
		return App{Shard: shard, Epoch: g.near(s.Epoch), Type: pickOf(g, "counter", "counter", "counter", "other"),
			Payload: payload, Now: now}
	case 13:
		return DeclareElection{Group: pickOf(g, "g1", "g2", ""), Name: pickOf(g, "e1", "e2", ""),
			Partitions: pickOf(g, uint32(4), uint32(4), uint32(4), uint32(5)), Now: now}
	default:
		return Settings{JobRetention: g.rarelyNeg(5000), MaxFinishedJobs: uint32(g.n(7)),
			DefaultMaxAttempts: uint32(g.n(4)), Now: now}
	}
}

func sameSentinel(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return errorCode(a) == errorCode(b)
}

func snapshotBytes(t interface{ Fatal(...any) }, f *FSM) []byte {
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.(*fsmSnapshot).writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPropertyReplicasAndModel: random command sequences give the same
// answers as the naive model (command by command), and a second replica fed
// the same commands in random Batches through the raft entry point — and
// restored from a snapshot at random points — ends in the identical state.
func TestPropertyReplicasAndModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := propConfig()
		a, asm := newTestFSM(t, cfg)
		b, bsm := newTestFSM(t, cfg)
		m := newModel(cfg)
		g := newGen(rapid.Uint64().Draw(t, "seed"))
		var pending []Command
		var entries uint64
		flush := func() {
			if len(pending) == 0 {
				return
			}
			var c Command = Batch{Commands: pending}
			if len(pending) == 1 {
				c = pending[0]
			}
			data, err := Encode(c)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			entries++
			b.ApplyBatch([]*raft.Log{{Index: entries, Type: raft.LogCommand, Data: data}})
			pending = nil
		}
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for i := range steps {
			c := g.command(m)
			want := m.apply(c)
			got := a.ApplyCommand(entries+1, c)
			if !sameSentinel(want.Err, got.Err) {
				t.Fatalf("step %d %#v: model err %v, fsm err %v", i, c, want.Err, got.Err)
			}
			if want.Err == nil || !errors.Is(want.Err, ErrApplication) {
				if !reflect.DeepEqual(want.Node, got.Node) || !reflect.DeepEqual(want.Shard, got.Shard) ||
					!reflect.DeepEqual(want.Job, got.Job) || want.Duplicate != got.Duplicate || !bytes.Equal(want.Response, got.Response) ||
					want.Election != got.Election {
					t.Fatalf("step %d %#v:\nmodel %+v\nfsm   %+v", i, c, want, got)
				}
			}
			pending = append(pending, c)
			if g.n(4) == 0 {
				flush()
			}
			if g.n(40) == 0 {
				flush()
				snap := snapshotBytes(t, b)
				b, bsm = newTestFSM(t, cfg)
				if err := b.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
					t.Fatalf("restore: %v", err)
				}
			}
		}
		flush()
		if da, db := dumpState(a.State()), dumpState(b.State()); da != db {
			t.Fatalf("replicas differ:\n--- single\n%s--- batched\n%s", da, db)
		}
		if !reflect.DeepEqual(asm.logs, bsm.logs) || !reflect.DeepEqual(asm.logs, m.appLog) {
			t.Fatalf("application state differs: %v / %v / model %v", asm.logs, bsm.logs, m.appLog)
		}
		// The whole state against the model.
		st := a.State()
		for id, n := range m.nodes {
			if got, _ := st.Node(id); got != n {
				t.Fatalf("node %s: model %+v, fsm %+v", id, n, got)
			}
		}
		for id, r := range m.shards {
			if got, _ := st.Shard(id); got != r {
				t.Fatalf("shard %d: model %+v, fsm %+v", id, r, got)
			}
		}
		if len(m.nodes) != len(st.Nodes()) || len(m.shards) != len(st.Shards()) || len(m.jobs) != st.NumJobs() {
			t.Fatalf("table sizes differ: model %d/%d/%d, fsm %d/%d/%d", len(m.nodes), len(m.shards), len(m.jobs),
				len(st.Nodes()), len(st.Shards()), st.NumJobs())
		}
		for id, j := range m.jobs {
			got, _ := st.Job(id)
			if !reflect.DeepEqual(got, j) {
				t.Fatalf("job %d: model %+v, fsm %+v", id, j, got)
			}
			found := false
			for _, x := range st.Jobs(j.Shard, j.State) {
				found = found || x.ID == id
			}
			if !found {
				t.Fatalf("job %d missing from Jobs(%d, %s)", id, j.Shard, j.State)
			}
		}
	})
}

// TestPropertySnapshotRestore: restore(snapshot(s)) == s, and a snapshot of
// the restored state is byte-identical.
func TestPropertySnapshotRestore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := propConfig()
		a, asm := newTestFSM(t, cfg)
		m := newModel(cfg)
		g := newGen(rapid.Uint64().Draw(t, "seed"))
		steps := rapid.IntRange(0, 120).Draw(t, "steps")
		for i := range steps {
			c := g.command(m)
			m.apply(c)
			a.ApplyCommand(uint64(i+1), c)
		}
		snap := snapshotBytes(t, a)
		b, bsm := newTestFSM(t, cfg)
		if err := b.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if da, db := dumpState(a.State()), dumpState(b.State()); da != db {
			t.Fatalf("restored state differs:\n--- original\n%s--- restored\n%s", da, db)
		}
		if !reflect.DeepEqual(asm.logs, bsm.logs) {
			t.Fatalf("application state differs: %v / %v", asm.logs, bsm.logs)
		}
		if again := snapshotBytes(t, b); !bytes.Equal(snap, again) {
			t.Fatalf("snapshot of restored state differs (%d vs %d bytes)", len(snap), len(again))
		}
	})
}
