package ownership

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// wordAgent is n1 registered and renewed under cluster version 6, with a
// word ask in flight: it returns the agent, the ask and its local time.
func wordAgent(t *testing.T) (*Agent, WordAsk, time.Time) {
	t.Helper()
	a := newTestAgent(t)
	rd := registerAt(t, a, ledger.VersionHandoffWords)
	if rd.Renew == nil || rd.WordAsk == nil {
		t.Fatalf("after registration under version 6: renew %v word ask %v, want both", rd.Renew, rd.WordAsk)
	}
	asked := t0.Add(2 * time.Millisecond)
	a.Step(t0.Add(3*time.Millisecond), RenewOutcome{Token: rd.Renew.Token, CommitIndex: 1})
	if a.Status().LeaseEnd.IsZero() {
		t.Fatal("no lease after the renewal")
	}
	return a, *rd.WordAsk, asked
}

var (
	n2rec      = ledger.NodeRecord{ID: "n2", Incarnation: 1, Liveness: 1, Seq: 1}
	revokingTo = ledger.ShardRecord{Shard: 0, Epoch: 3, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1,
		State: ledger.ShardRevoking, Target: "n1"}
)

// TestAgentActsOnWord: rule 1 of the handoff on a word. The target acts
// at e+1 on the old owner's word only while its replica shows the shard
// Revoking from the sender at e toward it and until the relayed bound,
// counted from its ask and scaled by (1−δ)/(1+δ) — not until its own
// lease ends (fails under the word-past-lease mutation); once the
// Transfer applies it keeps acting at e+1 as the owner, with no stop.
func TestAgentActsOnWord(t *testing.T) {
	cfg := TestConfig()
	a, ask, asked := wordAgent(t)
	valid := 300 * time.Millisecond
	w := Word{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: valid}
	until := WordUntil(cfg, w, asked)
	if want := asked.Add(time.Duration(float64(valid) * 0.9 / 1.1)); until.Sub(want).Abs() > time.Microsecond {
		t.Fatalf("WordUntil %v after the ask, want %v", until.Sub(asked), want.Sub(asked))
	}
	lease := a.Status().LeaseEnd
	if !lease.After(until.Add(100 * time.Millisecond)) {
		t.Fatalf("test premise: the lease (%v) ends well after the word (%v)", lease.Sub(t0), until.Sub(t0))
	}

	// The word arrives before the replica shows the Revoke: not yet.
	now := t0.Add(5 * time.Millisecond)
	rd := a.Step(now, WordOutcome{Token: ask.Token, Words: []Word{w}})
	if len(rd.Changes) != 0 {
		t.Fatalf("acting on a word the replica does not confirm: %+v", rd.Changes)
	}
	rd = a.Step(now, Observed{Applied: 2, Nodes: []ledger.NodeRecord{n2rec}, Shards: []ledger.ShardRecord{revokingTo},
		Version: ledger.VersionHandoffWords})
	if len(rd.Changes) != 1 || !rd.Changes[0].Acting || rd.Changes[0].Epoch != 4 || !rd.Changes[0].Deadline.Equal(until) {
		t.Fatalf("changes %+v, want acting at epoch 4 until the word's end %v", rd.Changes, until.Sub(t0))
	}
	if e, _, ok := a.Token(now, 0); !ok || e != 4 {
		t.Fatalf("token %d %v, want epoch 4", e, ok)
	}
	if !a.OnWord(now, 0) {
		t.Fatal("OnWord false while acting on the word")
	}
	if rd.WakeAt.After(until) {
		t.Fatalf("wakes at %v, after the word ends (%v)", rd.WakeAt.Sub(t0), until.Sub(t0))
	}
	// Past the word's bound it stops, whatever its lease says.
	rd = a.Step(until, Tick{})
	if len(rd.Changes) != 1 || rd.Changes[0].Acting || rd.Changes[0].Epoch != 4 {
		t.Fatalf("changes at the word's end %+v, want a stop of epoch 4", rd.Changes)
	}
	if _, ok := a.Acting(until.Add(time.Millisecond), 0); ok {
		t.Fatal("acting past the word's bound")
	}
}

// TestAgentWordThenTransfer: the Transfer applying while the target acts
// on the word continues the same epoch without a stop; a word for another
// epoch, another target, or under version 5 is never acted on.
func TestAgentWordThenTransfer(t *testing.T) {
	a, ask, _ := wordAgent(t)
	now := t0.Add(5 * time.Millisecond)
	a.Step(now, Observed{Applied: 2, Nodes: []ledger.NodeRecord{n2rec}, Shards: []ledger.ShardRecord{revokingTo},
		Version: ledger.VersionHandoffWords})
	rd := a.Step(now, WordOutcome{Token: ask.Token, Words: []Word{{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: time.Second}}})
	if len(rd.Changes) != 1 || rd.Changes[0].Epoch != 4 || !rd.Changes[0].Acting {
		t.Fatalf("changes %+v, want acting at 4", rd.Changes)
	}
	owned := ledger.ShardRecord{Shard: 0, Epoch: 4, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned}
	rd = a.Step(now.Add(time.Millisecond), Observed{Applied: 3, Shards: []ledger.ShardRecord{owned}, Version: ledger.VersionHandoffWords})
	for _, c := range rd.Changes {
		if !c.Acting || c.Epoch != 4 {
			t.Fatalf("the Transfer's apply gave %+v, want epoch 4 acting on", rd.Changes)
		}
	}
	if a.OnWord(now.Add(time.Millisecond), 0) {
		t.Fatal("still on the word once owner")
	}
	if ac, ok := a.Acting(now.Add(time.Millisecond), 0); !ok || ac.Epoch != 4 || !ac.Until.Equal(a.Status().LeaseEnd) {
		t.Fatalf("acting %+v %v, want epoch 4 until the lease end", ac, ok)
	}

	cfg := TestConfig()
	for _, c := range []struct {
		name    string
		version uint32
		w       Word
		rec     ledger.ShardRecord
	}{
		{"another epoch", ledger.VersionHandoffWords, Word{Shard: 0, Epoch: 2, From: "n2", To: "n1", Valid: time.Second}, revokingTo},
		{"another sender", ledger.VersionHandoffWords, Word{Shard: 0, Epoch: 3, From: "n3", To: "n1", Valid: time.Second}, revokingTo},
		{"another target", ledger.VersionHandoffWords, Word{Shard: 0, Epoch: 3, From: "n2", To: "n3", Valid: time.Second}, revokingTo},
		{"version 5", ledger.VersionHandoffWords - 1, Word{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: time.Second}, revokingTo},
		{"owned, not revoking", ledger.VersionHandoffWords, Word{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: time.Second},
			ledger.ShardRecord{Shard: 0, Epoch: 3, Owner: "n2", State: ledger.ShardOwned, Target: "n1"}},
	} {
		if _, ok := WordActing(cfg, "n1", c.version, c.w, t0, c.rec, t0.Add(time.Hour), t0); ok {
			t.Errorf("%s: WordActing true", c.name)
		}
	}
	if _, ok := WordActing(cfg, "n1", ledger.VersionHandoffWords, Word{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: time.Second},
		t0, revokingTo, t0.Add(time.Hour), t0); !ok {
		t.Error("WordActing false on a matching word")
	}
	if _, ok := WordActing(cfg, "n1", ledger.VersionHandoffWords, Word{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: time.Second},
		t0, revokingTo, t0, t0); ok {
		t.Error("WordActing true without a lease")
	}
}

// TestHandoffDecidedOnce: rule 3 on the old owner's side. Under version 6
// a shard revoked toward a target leaves by the Transfer to it only: an
// offer made again stays a Transfer to the same target even when the
// target started draining (a Release then could let the shard move
// elsewhere while the target acts on the word), and so does the first
// offer of a new process of the same incarnation; under version 5 it
// becomes a Release as before.
func TestHandoffDecidedOnce(t *testing.T) {
	cfg := TestConfig()
	for _, v := range []uint32{ledger.VersionHandoffWords - 1, ledger.VersionHandoffWords} {
		tr, err := NewTracker(cfg, "n2", 1)
		if err != nil {
			t.Fatal(err)
		}
		tr.ClusterVersion(v)
		tr.liveness = 1 // registered at liveness 1, its lease already over: it hands over at once
		n1 := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 1}
		tr.ObserveNode(n1)
		tr.ObserveNode(n2rec)
		rec := revokingTo
		rec.Target = "n1"
		tr.ObserveShard(t0, rec)
		first := tr.Handoffs(t0)
		if len(first) != 1 {
			t.Fatalf("v%d: handoffs %+v", v, first)
		}
		if tf, ok := first[0].(ledger.Transfer); !ok || tf.To != "n1" {
			t.Fatalf("v%d: first handoff %+v, want a Transfer to n1", v, first[0])
		}
		n1.Draining = true
		tr.ObserveNode(n1)
		again := tr.Handoffs(t0.Add(cfg.RenewEvery))
		_, isTransfer := again[0].(ledger.Transfer)
		if v >= ledger.VersionHandoffWords != isTransfer {
			t.Fatalf("v%d: handoff offered again %+v", v, again[0])
		}
		// A new process of the same incarnation (its replica replayed).
		tr2, err := NewTracker(cfg, "n2", 1)
		if err != nil {
			t.Fatal(err)
		}
		tr2.ClusterVersion(v)
		tr2.liveness = 1
		tr2.ObserveNode(n1)
		tr2.ObserveNode(n2rec)
		tr2.ObserveShard(t0, rec)
		first = tr2.Handoffs(t0)
		if _, isTransfer := first[0].(ledger.Transfer); v >= ledger.VersionHandoffWords != isTransfer {
			t.Fatalf("v%d: a restarted process's handoff %+v", v, first[0])
		}
	}
}

// TestPlannerWaitsOutWords: rule 3 of the handoff on a word, the
// planner's side. Under version 6 a shard revoked toward a target whose
// owner's ownership became invalid (here: the owner restarted) is granted
// again only after the takeover wait since the leader saw the Revoke,
// which bounds every word the target may hold (WordValid); under version
// 5 it is granted at once, as before. Fails under the retarget-after-word
// mutation.
func TestPlannerWaitsOutWords(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 4
	for _, v := range []uint32{ledger.VersionHandoffWords - 1, ledger.VersionHandoffWords} {
		p, err := NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		members := []Member{{ID: "n1", Incarnation: 2, State: member.Alive, Health: 1}, {ID: "n2", Incarnation: 1, State: member.Alive, Health: 1}}
		n1 := ledger.NodeRecord{ID: "n1", Incarnation: 2, Liveness: 1, Seq: 5, MaxVersion: v}
		n2 := ledger.NodeRecord{ID: "n2", Incarnation: 1, Liveness: 1, Seq: 5, MaxVersion: v}
		var shards []ledger.ShardRecord
		for s := range uint32(4) {
			rec := ledger.ShardRecord{Shard: s, Epoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned}
			if s == 0 {
				// Revoking from n1's first incarnation toward n2.
				rec = ledger.ShardRecord{Shard: 0, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardRevoking, Target: "n2"}
			}
			shards = append(shards, rec)
		}
		in := Input{Members: members, Nodes: []ledger.NodeRecord{n1, n2}, Shards: shards,
			Cluster: ledger.ClusterInfo{Name: "c", Partitions: 4, Version: v}}
		p.Establish(t0, in, t0)
		granted := func(now time.Time) bool {
			cmds, err := p.Plan(now, in)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				if g, ok := c.(ledger.Grant); ok && g.Shard == 0 {
					return true
				}
			}
			return false
		}
		early := t0.Add(10 * time.Millisecond)
		if v < ledger.VersionHandoffWords {
			if !granted(early) {
				t.Fatalf("v%d: the restarted owner's shard is not granted at once", v)
			}
			continue
		}
		d, ok := p.WordValid(early, shards[0], "n1", "n2")
		if want := cfg.TakeoverAfter() - 10*time.Millisecond; !ok || d != want {
			t.Fatalf("WordValid %v %v, want %v", d, ok, want)
		}
		if _, ok := p.WordValid(early, shards[0], "n1", "n3"); ok {
			t.Fatal("WordValid for a word to another node than the Revoke's target")
		}
		if granted(early) {
			t.Fatalf("v%d: the shard revoked toward n2 is granted elsewhere %v after the Revoke was seen; the takeover wait is %v",
				v, early.Sub(t0), cfg.TakeoverAfter())
		}
		late := t0.Add(cfg.TakeoverAfter())
		for _, n := range []ledger.NodeRecord{n1, n2} {
			if err := p.Renew(late.Add(-time.Millisecond), n, n.Incarnation, n.Liveness); err != nil {
				t.Fatal(err)
			}
		}
		if !granted(late) {
			t.Fatalf("v%d: not granted after the takeover wait", v)
		}
	}
}

// TestWordValidClamped: a word's Valid is cut to the takeover wait
// (Lease+Drain)·(1+δ) on the target, whatever the leader relayed: no
// leader's wait is longer, so a larger bound is never honoured.
func TestWordValidClamped(t *testing.T) {
	cfg := TestConfig()
	asked := t0
	wait := cfg.TakeoverAfter()
	w := Word{Shard: 0, Epoch: 3, From: "n2", To: "n1", Valid: wait}
	want := WordUntil(cfg, w, asked)
	w.Valid = 100 * wait
	if got := WordUntil(cfg, w, asked); !got.Equal(want) {
		t.Fatalf("Valid %v: acts until %v, want %v (clamped to %v)", w.Valid, got.Sub(asked), want.Sub(asked), wait)
	}
	w.Valid = wait / 2
	if got := WordUntil(cfg, w, asked); !got.Before(want) {
		t.Fatalf("Valid %v: acts until %v, want before %v", w.Valid, got.Sub(asked), want.Sub(asked))
	}
}

// TestWordValidSeesUnobservedRevoke: a word told before the planner's next
// round observed its Revoke (the old owner was faster than the round) is
// valid for the whole takeover wait from then, and that wait — not an
// earlier one — is what the planner's own takeover grant then waits out.
func TestWordValidSeesUnobservedRevoke(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 2
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := ledger.VersionHandoffWords
	members := []Member{{ID: "n1", Incarnation: 1, State: member.Alive, Health: 1}, {ID: "n2", Incarnation: 1, State: member.Alive, Health: 1}}
	nodes := []ledger.NodeRecord{{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 5, MaxVersion: v}, {ID: "n2", Incarnation: 1, Liveness: 1, Seq: 5, MaxVersion: v}}
	owned := []ledger.ShardRecord{
		{Shard: 0, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned},
		{Shard: 1, Epoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned},
	}
	in := Input{Members: members, Nodes: nodes, Shards: owned, Cluster: ledger.ClusterInfo{Name: "c", Partitions: 2, Version: v}}
	p.Establish(t0, in, t0)
	if _, err := p.Plan(t0, in); err != nil {
		t.Fatal(err)
	}
	revoking := ledger.ShardRecord{Shard: 0, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardRevoking, Target: "n2"}
	told := t0.Add(50 * time.Millisecond)
	d, ok := p.WordValid(told, revoking, "n1", "n2")
	if want := cfg.TakeoverAfter(); !ok || d != want {
		t.Fatalf("WordValid of an unobserved Revoke = %v %v, want %v true", d, ok, want)
	}
	if d, ok := p.WordValid(told.Add(time.Millisecond), revoking, "n1", "n2"); !ok || d != cfg.TakeoverAfter()-time.Millisecond {
		t.Fatalf("WordValid 1 ms later = %v %v: the Revoke's seen time moved", d, ok)
	}
	// The owner restarts (its ownership is invalid): the planner still
	// waits the takeover wait counted from the word's reading.
	nodes[0].Incarnation, members[0].Incarnation = 2, 2
	in2 := in
	in2.Shards = []ledger.ShardRecord{revoking, owned[1]}
	grantedAt := func(now time.Time) bool {
		cmds, err := p.Plan(now, in2)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if g, ok := c.(ledger.Grant); ok && g.Shard == 0 {
				return true
			}
		}
		return false
	}
	if grantedAt(told.Add(cfg.TakeoverAfter() - time.Millisecond)) {
		t.Fatal("the shard was granted elsewhere before the takeover wait counted from the word's bound")
	}
}

// TestWordValidRefusesStaleRecord: the record the leader reads for a word
// may be older than what its last round observed (node reads its replica
// before taking the loop's lock). A Revoking record older than the
// planner's view of the shard — here granted elsewhere at e+2 after the
// takeover wait — is not a Revoke the planner "has not seen yet": WordValid
// refuses it instead of starting a new takeover wait at now. Likewise a
// record older than the shard's revoke track never replaces the track.
// (Review of h/tails, finding 1; mutation word-stale-record.)
func TestWordValidRefusesStaleRecord(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 2
	v := ledger.VersionHandoffWords
	var members []Member
	var nodes []ledger.NodeRecord
	for _, id := range []string{"n1", "n2", "n3"} {
		members = append(members, Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1})
		nodes = append(nodes, ledger.NodeRecord{ID: id, Incarnation: 1, Liveness: 1, Seq: 5, MaxVersion: v})
	}
	revoking := ledger.ShardRecord{Shard: 0, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardRevoking, Target: "n2"}
	other := ledger.ShardRecord{Shard: 1, Epoch: 1, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned}
	in := Input{Members: members, Nodes: nodes, Shards: []ledger.ShardRecord{revoking, other}, Cluster: ledger.ClusterInfo{Name: "c", Partitions: 2, Version: v}}

	t.Run("older than the last round", func(t *testing.T) {
		p, err := NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.Establish(t0, in, t0)
		after := t0.Add(cfg.TakeoverAfter() + time.Second)
		in2 := in
		in2.Shards = []ledger.ShardRecord{{Shard: 0, Epoch: 3, Owner: "n3", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned}, other}
		if _, err := p.Plan(after, in2); err != nil {
			t.Fatal(err)
		}
		if d, ok := p.WordValid(after.Add(time.Millisecond), revoking, "n1", "n2"); ok {
			t.Fatalf("WordValid on a record older than the planner's last round = %v true; want false", d)
		}
	})
	t.Run("older than the revoke track", func(t *testing.T) {
		p, err := NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.Establish(t0, in, t0)
		// A newer Revoke (epoch 3, toward n2 again) is seen through a word
		// before any round: its track must not be replaced by epoch 1.
		newer := revoking
		newer.Epoch = 3
		told := t0.Add(time.Second)
		if _, ok := p.WordValid(told, newer, "n1", "n2"); !ok {
			t.Fatal("WordValid of a newer unobserved Revoke = false; want true")
		}
		if d, ok := p.WordValid(told.Add(time.Millisecond), revoking, "n1", "n2"); ok {
			t.Fatalf("WordValid on a record older than the revoke track = %v true; want false", d)
		}
		if r := p.revokes[0]; r.epoch != 3 || !r.seen.Equal(told) {
			t.Fatalf("revoke track = %+v; want epoch 3 seen at %v", r, told)
		}
	})
}
