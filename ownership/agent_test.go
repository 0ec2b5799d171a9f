package ownership

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

func newTestAgent(t testing.TB) *Agent {
	t.Helper()
	a, err := NewAgent(TestConfig(), "n1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// register runs the first heartbeat to acceptance at t0 and returns the
// ready of the Observed that extends the lease.
func register(t *testing.T, a *Agent) Ready {
	t.Helper()
	rd := a.Step(t0, Tick{})
	if rd.Heartbeat == nil {
		t.Fatal("the first step asks for no heartbeat")
	}
	self := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 1}
	a.Step(t0.Add(time.Millisecond), HeartbeatOutcome{Token: rd.Heartbeat.Token, Index: 1, Result: ledger.Result{Node: self}})
	return a.Step(t0.Add(2*time.Millisecond), Observed{Applied: 1, Nodes: []ledger.NodeRecord{self}})
}

func owned(s uint32, e uint64, state ledger.ShardState) ledger.ShardRecord {
	return ledger.ShardRecord{Shard: s, Epoch: e, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: state, Target: "n2"}
}

func TestAgentHeartbeatSchedule(t *testing.T) {
	cfg := TestConfig()
	a := newTestAgent(t)
	rd := a.Step(t0, Tick{})
	if rd.Heartbeat == nil || rd.Heartbeat.Command.Node != "n1" || rd.Heartbeat.Command.Liveness != 0 {
		t.Fatalf("first heartbeat = %+v", rd.Heartbeat)
	}
	if !rd.WakeAt.Equal(t0.Add(cfg.RenewEvery)) {
		t.Fatalf("WakeAt = %v, want t0+RenewEvery", rd.WakeAt.Sub(t0))
	}
	if rd := a.Step(t0.Add(cfg.RenewEvery-1), Tick{}); rd.Heartbeat != nil {
		t.Fatal("a heartbeat before RenewEvery")
	}
	if rd := a.Step(t0.Add(cfg.RenewEvery), Tick{}); rd.Heartbeat == nil {
		t.Fatal("no heartbeat at RenewEvery")
	}
	// Two unanswered: no third until one is answered or Lease passed.
	rd = a.Step(t0.Add(2*cfg.RenewEvery), Tick{})
	if rd.Heartbeat != nil {
		t.Fatal("a third heartbeat in flight")
	}
	if !rd.WakeAt.Equal(t0.Add(cfg.Lease)) {
		t.Fatalf("WakeAt with no slot = %v, want t0+Lease", rd.WakeAt.Sub(t0))
	}
	if rd := a.Step(t0.Add(cfg.Lease), Tick{}); rd.Heartbeat == nil {
		t.Fatal("no heartbeat once the first ask stopped counting")
	}
}

func TestAgentHeartbeatVerdicts(t *testing.T) {
	self := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1}
	for _, tc := range []struct {
		name   string
		out    HeartbeatOutcome
		want   Verdict
		lease  bool
		fenced bool
	}{
		{"lost", HeartbeatOutcome{Err: ErrLeadershipLost}, VerdictFailed, false, false},
		{"accepted", HeartbeatOutcome{Index: 1, Result: ledger.Result{Node: self}}, VerdictAccepted, true, false},
		{"expired", HeartbeatOutcome{Result: ledger.Result{Node: ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 2},
			Err: ledger.ErrStaleLiveness}}, VerdictExpired, false, false},
		{"fenced", HeartbeatOutcome{Result: ledger.Result{Node: ledger.NodeRecord{ID: "n1", Incarnation: 2, Liveness: 1},
			Err: fmt.Errorf("x: %w", ledger.ErrStaleIncarnation)}}, VerdictFenced, false, true},
		{"version", HeartbeatOutcome{Result: ledger.Result{Err: ledger.ErrVersion}}, VerdictVersion, false, false},
		{"other", HeartbeatOutcome{Result: ledger.Result{Err: errors.New("boom")}}, VerdictFailed, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAgent(t)
			ask := a.Step(t0, Tick{}).Heartbeat
			tc.out.Token = ask.Token
			rd := a.Step(t0.Add(time.Millisecond), tc.out)
			if rd.Verdict != tc.want {
				t.Fatalf("verdict %d, want %d", rd.Verdict, tc.want)
			}
			a.Step(t0.Add(2*time.Millisecond), Observed{Applied: 1, Nodes: []ledger.NodeRecord{self}})
			st := a.Status()
			if got := !st.LeaseEnd.IsZero(); got != tc.lease {
				t.Fatalf("lease %v, want %v", st.LeaseEnd, tc.lease)
			}
			if st.Fenced != tc.fenced {
				t.Fatalf("fenced %v, want %v", st.Fenced, tc.fenced)
			}
			if tc.lease && !st.LeaseEnd.Equal(t0.Add(TestConfig().nodeLease())) {
				t.Fatalf("lease end %v after t0, want Lease·(1−δ) from the ask", st.LeaseEnd.Sub(t0))
			}
			if tc.fenced {
				if rd := a.Step(t0.Add(time.Hour), Tick{}); rd.Heartbeat != nil {
					t.Fatal("a fenced agent asks for a heartbeat")
				}
			}
		})
	}
}

func TestAgentTokenGuardAndResign(t *testing.T) {
	a := newTestAgent(t)
	register(t, a)
	now := t0.Add(3 * time.Millisecond)
	rd := a.Step(now, Observed{Applied: 2, Shards: []ledger.ShardRecord{owned(3, 7, ledger.ShardOwned)}})
	if len(rd.Changes) != 1 || !rd.Changes[0].Acting || rd.Changes[0].Epoch != 7 {
		t.Fatalf("changes %+v, want shard 3 acting at 7", rd.Changes)
	}
	e, until, ok := a.Token(now, 3)
	lease := a.Status().LeaseEnd
	if !ok || e != 7 || !until.Equal(lease.Add(-a.Guard())) {
		t.Fatalf("Token = %d %v %v, want 7 until lease−guard", e, until, ok)
	}
	if _, _, ok := a.Token(lease.Add(-a.Guard()), 3); ok {
		t.Fatal("a token at the guard")
	}
	if _, ok := a.Acting(lease.Add(-a.Guard()), 3); !ok {
		t.Fatal("not acting before the lease ends")
	}
	// Resign: stops at once and stays stopped at this epoch.
	rd = a.Step(now, ShardResigned{Shard: 3, Epoch: 7})
	if len(rd.Changes) != 1 || rd.Changes[0].Acting {
		t.Fatalf("changes after resign %+v", rd.Changes)
	}
	a.Step(now, Observed{Applied: 3, Shards: []ledger.ShardRecord{owned(3, 7, ledger.ShardOwned)}})
	if _, ok := a.Acting(now, 3); ok {
		t.Fatal("acting again on the resigned epoch")
	}
	// Granted back at a new epoch: a new ownership.
	a.Step(now, Observed{Applied: 4, Shards: []ledger.ShardRecord{owned(3, 8, ledger.ShardOwned)}})
	if e, _, ok := a.Token(now, 3); !ok || e != 8 {
		t.Fatalf("Token after the regrant = %d %v", e, ok)
	}
}

func TestAgentRevokeDrainHandoff(t *testing.T) {
	a := newTestAgent(t)
	register(t, a)
	now := t0.Add(3 * time.Millisecond)
	other := ledger.NodeRecord{ID: "n2", Incarnation: 4, Liveness: 2}
	a.Step(now, Observed{Applied: 2, Nodes: []ledger.NodeRecord{other}, Shards: []ledger.ShardRecord{owned(1, 5, ledger.ShardOwned)}})
	rd := a.Step(now, Observed{Applied: 3, Shards: []ledger.ShardRecord{owned(1, 5, ledger.ShardRevoking)}})
	if len(rd.Changes) != 1 || !rd.Changes[0].Draining {
		t.Fatalf("changes on revoke %+v, want draining", rd.Changes)
	}
	if _, _, ok := a.Token(now, 1); ok {
		t.Fatal("a token for a revoked shard")
	}
	rd = a.Step(now, ShardDrained{Shard: 1, Epoch: 5})
	want := ledger.Transfer{Shard: 1, Epoch: 5, From: "n1", To: "n2", ToIncarnation: 4, ToLiveness: 2, Now: now.UnixNano(), Reason: "handoff"}
	if len(rd.Proposals) != 1 || rd.Proposals[0] != ledger.Command(want) {
		t.Fatalf("proposals %+v, want %+v", rd.Proposals, want)
	}
	if len(rd.Changes) != 1 || rd.Changes[0].Acting {
		t.Fatalf("changes on drained %+v, want a stop", rd.Changes)
	}
}

func TestAgentDrainReconciliation(t *testing.T) {
	cfg := TestConfig()
	a := newTestAgent(t)
	register(t, a)
	now := t0.Add(3 * time.Millisecond)
	rd := a.Step(now, DrainWish{Draining: true})
	if len(rd.Proposals) != 1 || rd.Proposals[0] != ledger.Command(ledger.SetDraining{Node: "n1", Incarnation: 1, Draining: true, Now: now.UnixNano()}) {
		t.Fatalf("proposals %+v", rd.Proposals)
	}
	// A delayed duplicate flipped the record back: proposed again, but not
	// before drainRetry.
	self := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 1}
	if rd := a.Step(now.Add(time.Millisecond), Observed{Applied: 5, Nodes: []ledger.NodeRecord{self}}); len(rd.Proposals) != 0 {
		t.Fatalf("re-proposed at once: %+v", rd.Proposals)
	} else if rd.WakeAt.After(now.Add(2 * cfg.RenewEvery)) {
		t.Fatalf("WakeAt %v, want at or before the retry at %v", rd.WakeAt.Sub(now), 2*cfg.RenewEvery)
	}
	if rd := a.Step(now.Add(2*cfg.RenewEvery), Tick{}); len(rd.Proposals) != 1 {
		t.Fatalf("not re-proposed after the retry interval: %+v", rd.Proposals)
	}
	self.Draining = true
	a.Step(now.Add(3*cfg.RenewEvery), Observed{Applied: 6, Nodes: []ledger.NodeRecord{self}})
	if rd := a.Step(now.Add(time.Hour), Tick{}); len(rd.Proposals) != 0 {
		t.Fatalf("proposed although the record agrees: %+v", rd.Proposals)
	}
	// A record of an older incarnation is not this process's to fix.
	b, _ := NewAgent(cfg, "n1", 2)
	b.Step(t0, Observed{Applied: 1, Nodes: []ledger.NodeRecord{{ID: "n1", Incarnation: 1, Draining: true}}})
	if rd := b.Step(t0.Add(time.Hour), Tick{}); len(rd.Proposals) != 0 {
		t.Fatalf("reconciled an older incarnation's record: %+v", rd.Proposals)
	}
}

// TestAgentProperties drives an agent with random inputs and checks after
// every step: a token implies acting on an Owned shard at least Guard
// before the lease end; acting implies a valid lease; the Changes stream,
// replayed, is exactly the acting set; WakeAt is in the future.
func TestAgentProperties(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		if err := agentProperty(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func agentProperty(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0))
	cfg := TestConfig()
	a, err := NewAgent(cfg, "n1", 1)
	if err != nil {
		return err
	}
	now := t0
	var asks []HeartbeatAsk
	var index uint64
	live := uint64(1)
	acting := map[uint32]uint64{}
	epochs := map[uint32]uint64{}
	for step := 0; step < 200; step++ {
		now = now.Add(time.Duration(rng.IntN(int(cfg.RenewEvery))))
		var in AgentInput = Tick{}
		switch k := rng.IntN(8); {
		case k == 0 && len(asks) > 0:
			ask := asks[0]
			asks = asks[1:]
			index++
			out := HeartbeatOutcome{Token: ask.Token, Index: index}
			switch rng.IntN(4) {
			case 0:
				out.Err = ErrLeadershipLost
			case 1:
				live++
				out.Result = ledger.Result{Node: ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: live}, Err: ledger.ErrStaleLiveness}
			default:
				out.Result = ledger.Result{Node: ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: live}}
			}
			in = out
		case k <= 3:
			index++
			s := uint32(rng.IntN(4))
			if rng.IntN(3) == 0 {
				epochs[s]++
			}
			rec := ledger.ShardRecord{Shard: s, Epoch: epochs[s], Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: live,
				State: ledger.ShardState(rng.IntN(3)), Target: "n2"}
			if rng.IntN(4) == 0 {
				rec.Owner = "n2"
			}
			in = Observed{Applied: index, Shards: []ledger.ShardRecord{rec},
				Nodes: []ledger.NodeRecord{{ID: "n1", Incarnation: 1, Liveness: live}}}
		case k == 4:
			s := uint32(rng.IntN(4))
			in = ShardDrained{Shard: s, Epoch: epochs[s]}
		case k == 5:
			s := uint32(rng.IntN(4))
			in = ShardResigned{Shard: s, Epoch: epochs[s]}
		case k == 6:
			in = DrainWish{Draining: rng.IntN(2) == 0}
		}
		rd := a.Step(now, in)
		if rd.Heartbeat != nil {
			asks = append(asks, *rd.Heartbeat)
		}
		for _, c := range rd.Changes {
			if c.Acting {
				acting[c.Shard] = c.Epoch
			} else {
				delete(acting, c.Shard)
			}
		}
		var replay []uint32
		for s := range acting {
			replay = append(replay, s)
		}
		slices.Sort(replay)
		if got := a.ActingShards(now); !slices.Equal(got, replay) {
			return fmt.Errorf("step %d (%T): acting %v, changes replay to %v", step, in, got, replay)
		}
		if !rd.WakeAt.After(now) {
			return fmt.Errorf("step %d: WakeAt %v not after now", step, rd.WakeAt.Sub(now))
		}
		lease := a.Status().LeaseEnd
		for s := range uint32(4) {
			ac, isActing := a.Acting(now, s)
			if isActing && !now.Before(lease) {
				return fmt.Errorf("step %d: acting on %d after the lease end", step, s)
			}
			if e, until, ok := a.Token(now, s); ok {
				if !isActing || ac.Revoking || ac.Epoch != e || !until.Equal(lease.Add(-a.Guard())) || !now.Before(until) {
					return fmt.Errorf("step %d: token %d for shard %d but acting %+v %v", step, e, s, ac, isActing)
				}
			}
		}
	}
	return nil
}
