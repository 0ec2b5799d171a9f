package ownership

import (
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// reentryWorld drives a planner through rounds every 100 ms over three
// nodes: n1 and n3 always up, n2 up or down by a schedule. Up nodes renew
// (Planner.Renew) every round and are gossiped alive; a down n2 is gossiped
// dead and renews nothing. Every Revoking shard is transferred at once (a
// graceful drain), so the world is settled between the schedule's events.
type reentryWorld struct {
	t   *testing.T
	e   *plannerEnv
	now time.Duration
	up  bool
	inc uint64
}

func newReentryWorld(t *testing.T, cfg Config) *reentryWorld {
	t.Helper()
	e := newPlannerEnv(t, cfg)
	for _, id := range []string{"n1", "n2", "n3"} {
		e.members[id] = Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1}
		e.ledger.heartbeat(id, 1, false)
	}
	e.p.Establish(t0, e.input(), time.Time{})
	w := &reentryWorld{t: t, e: e, up: true, inc: 1}
	w.until(3 * time.Second)
	if !w.inRing() {
		t.Fatalf("n2 not in the ring after the cold start: %v", e.p.RingMembers())
	}
	return w
}

func (w *reentryWorld) inRing() bool { return slices.Contains(w.e.p.RingMembers(), "n2") }

// round runs one planner round at w.now, applying every proposal, then
// completes every handoff.
func (w *reentryWorld) round() {
	w.t.Helper()
	now := t0.Add(w.now)
	for _, id := range []string{"n1", "n2", "n3"} {
		if id == "n2" && !w.up {
			continue
		}
		rec := w.e.ledger.node[id]
		_ = w.e.p.Renew(now, rec, rec.Incarnation, rec.Liveness) // refused while expiring: the node would register again
	}
	cmds, err := w.e.p.Plan(now, w.e.input())
	if err != nil {
		w.t.Fatalf("%v: plan: %v", w.now, err)
	}
	checkOneOwnerPerShard(w.t, cmds)
	for _, c := range cmds {
		_ = w.e.ledger.apply(c) // a lost compare-and-set is harmless here
	}
	for s, r := range w.e.ledger.shard {
		if r.State == ledger.ShardRevoking {
			w.e.ledger.handoff(s, true)
		}
	}
}

// until runs rounds up to (and including) d.
func (w *reentryWorld) until(d time.Duration) {
	for ; w.now <= d; w.now += 100 * time.Millisecond {
		w.round()
	}
}

// crash stops n2 at w.now and runs until the leader has expired it.
func (w *reentryWorld) crash() {
	w.t.Helper()
	w.up = false
	w.e.members["n2"] = Member{ID: "n2", Incarnation: w.inc, State: member.Dead, Health: 1}
	start := w.now
	for w.inRing() || !w.e.p.nodes["n2"].expired {
		if w.now-start > 5*time.Second {
			w.t.Fatalf("n2 not expired within 5 s of its crash at %v", start)
		}
		w.round()
		w.now += 100 * time.Millisecond
	}
}

// restart brings n2 back at d with a new incarnation (its registration
// commits at d) and returns how long after d it re-entered the ring.
func (w *reentryWorld) restart(d time.Duration) time.Duration {
	w.t.Helper()
	w.until(d - 100*time.Millisecond)
	w.up = true
	w.inc++
	w.e.members["n2"] = Member{ID: "n2", Incarnation: w.inc, State: member.Alive, Health: 1}
	w.e.ledger.heartbeat("n2", w.inc, false)
	return w.enter(d)
}

// enter runs rounds from d until n2 is in the ring and returns how long
// that took.
func (w *reentryWorld) enter(d time.Duration) time.Duration {
	w.t.Helper()
	for w.now = d; !w.inRing(); w.now += 100 * time.Millisecond {
		if w.now-d > 10*time.Second {
			w.t.Fatalf("n2 (inc %d) not back in the ring within 10 s of %v", w.inc, d)
		}
		w.round()
	}
	return w.now - 100*time.Millisecond - d
}

// A node that restarts after its lease expired re-enters the ring one
// round after its first renewal in the new incarnation (here the round
// after its registration applied), not after StableFor, and gets its ring
// share back by handoff.
func TestPlannerReentryAfterRestartIsPrompt(t *testing.T) {
	for _, cfg := range []Config{TestConfig(), DefaultConfig()} {
		cfg.Ring.Partitions = 12
		w := newReentryWorld(t, cfg)
		w.crash()
		owned := func() int {
			n := 0
			for _, r := range w.e.ledger.shard {
				if r.Owner == "n2" && w.e.ledger.validRec(r) {
					n++
				}
			}
			return n
		}
		if n := owned(); n != 0 {
			t.Fatalf("expired n2 still owns %d shards", n)
		}
		took := w.restart(w.now + 30*time.Second)
		if took > 100*time.Millisecond {
			t.Errorf("StableFor %v: n2 re-entered %v after its registration, want ≤ 100 ms (one round after its first renewal)", cfg.StableFor, took)
		}
		w.until(w.now + 200*time.Millisecond)
		if n := owned(); n != 4 {
			t.Errorf("StableFor %v: n2 owns %d shards 200 ms after it re-entered, want its share 4", cfg.StableFor, n)
		}
	}
}

// The registration alone does not re-admit a node: it must renew with the
// leader in its new incarnation first.
func TestPlannerReentryWaitsForARenewal(t *testing.T) {
	cfg := TestConfig()
	w := newReentryWorld(t, cfg)
	w.crash()
	at := w.now + 10*time.Second
	w.until(at - 100*time.Millisecond)
	w.inc++
	w.e.members["n2"] = Member{ID: "n2", Incarnation: w.inc, State: member.Alive, Health: 1}
	w.e.ledger.heartbeat("n2", w.inc, false)
	// n2 registered but never renews (w.up stays false): it waits StableFor
	// like any joiner; the renewals of the others do not count for it.
	w.now = at
	for ; w.now < at+cfg.StableFor; w.now += 100 * time.Millisecond {
		w.round()
		if w.inRing() {
			t.Fatalf("n2 re-entered at %v (registration at %v) without a renewal in its new incarnation", w.now, at)
		}
	}
}

// A crash-looping node is held back: each restart within reentryWindow of
// the previous one is a strike, and its re-entry wait grows to StableFor.
// A restart after a quiet reentryWindow is prompt again.
func TestPlannerReentryCrashLoopBacksOff(t *testing.T) {
	cfg := TestConfig() // StableFor 500 ms: window 5 s
	w := newReentryWorld(t, cfg)
	var took []time.Duration
	for range 5 {
		w.crash()
		took = append(took, w.restart(w.now+500*time.Millisecond))
	}
	want := []time.Duration{0, cfg.StableFor / 4, cfg.StableFor / 2, cfg.StableFor, cfg.StableFor}
	for i := range want {
		// Rounds are 100 ms apart, and the first renewal is seen a round
		// after the registration.
		if took[i] < want[i] || took[i] > max(want[i], 100*time.Millisecond)+100*time.Millisecond {
			t.Errorf("restart %d of a crash loop: re-entered after %v, want %v (+ one round); all: %v", i+1, took[i], want[i], took)
		}
	}
	w.crash()
	if d := w.restart(w.now + reentryWindow(cfg.StableFor)); d > 100*time.Millisecond {
		t.Errorf("restart after a quiet window: re-entered after %v, want ≤ 100 ms", d)
	}
}

// What StableFor protects against is unchanged for a node that returns
// without restarting: expired while partitioned and back at its old
// incarnation (a new liveness epoch), or drained and undrained, it waits
// the full StableFor.
func TestPlannerReentryWithoutRestartWaitsStableFor(t *testing.T) {
	cfg := TestConfig()
	w := newReentryWorld(t, cfg)
	// A quick restart first (before its lease expired): it keeps its
	// place, and that restart is used up.
	w.inc++
	w.e.members["n2"] = Member{ID: "n2", Incarnation: w.inc, State: member.Alive, Health: 1}
	w.e.ledger.heartbeat("n2", w.inc, false)
	w.until(w.now + 300*time.Millisecond)
	if !w.inRing() {
		t.Fatal("n2 lost its place on a quick restart")
	}
	// A partition: expired, then back at the same incarnation. The node
	// re-registers with a heartbeat at the new liveness epoch.
	w.crash()
	at := w.now + 2*time.Second
	w.until(at - 100*time.Millisecond)
	w.up = true
	w.e.members["n2"] = Member{ID: "n2", Incarnation: w.inc, State: member.Alive, Health: 1}
	w.e.ledger.heartbeat("n2", w.inc, true)
	if d := w.enter(at); d < cfg.StableFor {
		t.Errorf("n2 back from a partition re-entered after %v, want ≥ StableFor %v", d, cfg.StableFor)
	}
	// Drained, then undrained, same incarnation.
	n := w.e.ledger.node["n2"]
	n.Draining = true
	w.e.ledger.node["n2"] = n
	w.until(w.now + 500*time.Millisecond)
	if w.inRing() {
		t.Fatal("draining n2 still in the ring")
	}
	n = w.e.ledger.node["n2"]
	n.Draining = false
	w.e.ledger.node["n2"] = n
	if d := w.enter(w.now); d < cfg.StableFor {
		t.Errorf("undrained n2 re-entered after %v, want ≥ StableFor %v", d, cfg.StableFor)
	}
}

// A node drained before a restart (a rolling upgrade) re-enters promptly
// with its new incarnation.
func TestPlannerReentryAfterDrainedRestart(t *testing.T) {
	w := newReentryWorld(t, TestConfig())
	n := w.e.ledger.node["n2"]
	n.Draining = true
	w.e.ledger.node["n2"] = n
	w.until(w.now + 500*time.Millisecond)
	if w.inRing() {
		t.Fatal("draining n2 still in the ring")
	}
	if d := w.restart(w.now + 300*time.Millisecond); d > 100*time.Millisecond {
		t.Errorf("n2 restarted after a drain re-entered after %v, want ≤ 100 ms", d)
	}
}

func TestReentryWait(t *testing.T) {
	const sf = 3 * time.Second
	for strikes, want := range []time.Duration{0, 750 * time.Millisecond, 1500 * time.Millisecond, sf, sf, sf} {
		if got := reentryWait(sf, strikes); got != want {
			t.Errorf("reentryWait(%v, %d) = %v, want %v", sf, strikes, got, want)
		}
	}
	if got := reentryWait(0, 2); got != 0 {
		t.Errorf("reentryWait(0, 2) = %v, want 0", got)
	}
}
