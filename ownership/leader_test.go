package ownership

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
)

// leaderInput is a table of three heartbeating members and no owners.
func leaderInput(l *testLedger) Input {
	in := Input{Shards: l.shards(), Nodes: l.nodes()}
	for _, id := range []string{"n1", "n2", "n3"} {
		in.Members = append(in.Members, Member{ID: id, Incarnation: 1, State: member.Alive, Health: 1})
	}
	return in
}

func newTestLeader(t *testing.T) (*Leader, *testLedger, Config) {
	t.Helper()
	cfg := TestConfig()
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLedger()
	for _, id := range []string{"n1", "n2", "n3"} {
		l.heartbeat(id, 1, false)
	}
	return NewLeader(p, 0), l, cfg
}

// The core's term: nothing as a follower; a Barrier on becoming leader
// (asked again after a failed one); Establish after it, then a round at
// once; no second round while proposals are out (the notification is
// kept); a round after accepted proposals; an unknown outcome ends the term
// (Barrier again); a deposed leader refuses renewals.
func TestLeaderTerm(t *testing.T) {
	lead, l, cfg := newTestLeader(t)
	now := time.Unix(1000, 0)
	step := func(ev LeaderInput) LeaderReady {
		now = now.Add(time.Millisecond)
		return lead.Step(now, ev)
	}
	if rd := step(RoundDue{In: leaderInput(l)}); !isIdle(rd) {
		t.Fatalf("follower round: %+v", rd)
	}
	if err := lead.Renew(now, ledger.NodeRecord{ID: "n1"}, 1, 1); err != ErrNotLeader {
		t.Fatalf("follower renew: %v", err)
	}
	if rd := step(LeadershipChanged{Leading: true}); !rd.Barrier {
		t.Fatalf("new leader: %+v, want a Barrier", rd)
	}
	if rd := step(Barriered{Err: errors.New("raft: no quorum")}); rd.Established || rd.WakeAt.IsZero() {
		t.Fatalf("failed barrier: %+v, want a wake-up and no term", rd)
	}
	if rd := step(RoundDue{}); !rd.Barrier {
		t.Fatalf("after a failed barrier: %+v, want a Barrier again", rd)
	}
	rd := step(Barriered{In: leaderInput(l)})
	if !rd.Established || !rd.RoundNow || !rd.Bound.Equal(now) {
		t.Fatalf("barrier before version 4: %+v, want a term at bound now and a round", rd)
	}
	// The members enter the ring after StableFor; then every partition
	// is granted in one round.
	proposals := func() LeaderReady {
		t.Helper()
		for range 100 {
			for _, id := range []string{"n1", "n2", "n3"} {
				l.heartbeat(id, l.node[id].Incarnation, false)
			}
			now = now.Add(cfg.RenewEvery)
			if rd := step(RoundDue{In: leaderInput(l)}); len(rd.Proposals) > 0 {
				return rd
			} else if rd.WakeAt.IsZero() || rd.WakeAt.Sub(now) > cfg.RenewEvery {
				t.Fatalf("round without proposals: %+v, want a wake-up within RenewEvery", rd)
			}
		}
		t.Fatal("no proposal in 100 rounds")
		return LeaderReady{}
	}
	rd = proposals()
	if len(rd.Proposals) != cfg.Ring.Partitions {
		t.Fatalf("first grants: %d proposals, want a grant per partition (%d)", len(rd.Proposals), cfg.Ring.Partitions)
	}
	round, cmds := rd.Round, rd.Proposals
	if rd := step(RoundDue{In: leaderInput(l)}); !isIdle(rd) || !lead.kickedNow {
		t.Fatalf("round while proposals are out: %+v", rd)
	}
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		errs[i] = l.apply(c)
	}
	if rd := step(Proposed{Round: round + 7, Errs: errs}); !isIdle(rd) {
		t.Fatalf("outcomes of another round: %+v", rd)
	}
	if rd := step(Proposed{Round: round, Errs: errs}); !rd.RoundNow {
		t.Fatalf("accepted proposals: %+v, want the next round at once", rd)
	}
	rd = step(RoundDue{In: leaderInput(l)})
	if len(rd.Proposals) != 0 || rd.WakeAt.IsZero() || rd.WakeAt.Sub(now) > cfg.RenewEvery {
		t.Fatalf("settled round: %+v, want no proposal and a wake-up within RenewEvery", rd)
	}
	if st := lead.Stats(); st.Terms != 1 || st.Accepted != uint64(len(cmds)) || st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}

	// An unknown outcome ends the term: n2 restarts (a new incarnation),
	// its shards are granted to it again, and one grant's outcome is
	// unknown.
	l.heartbeat("n2", 2, false)
	rd = proposals()
	lost := make([]error, len(rd.Proposals))
	lost[0] = fmt.Errorf("raft: %w", ErrLeadershipLost)
	if rd := step(Proposed{Round: rd.Round, Errs: lost}); !rd.Lost || rd.Barrier {
		t.Fatalf("unknown outcome: %+v, want the term ended", rd)
	}
	if lead.Established() {
		t.Fatal("still established after an unknown outcome")
	}
	if rd := step(RoundDue{In: leaderInput(l)}); !rd.Barrier {
		t.Fatalf("round after an unknown outcome: %+v, want a Barrier", rd)
	}
	if rd := step(LeadershipChanged{Leading: false}); !isIdle(rd) || lead.planner.Leading() {
		t.Fatalf("deposed: %+v, planner leading %v", rd, lead.planner.Leading())
	}
}

func isIdle(rd LeaderReady) bool {
	return !rd.Barrier && !rd.AskBound && len(rd.Proposals) == 0 && !rd.RoundNow && !rd.Established
}

// Under cluster version 4 the core asks for the voters' bound and
// establishes at EstablishBound of it; before a process saw version 4 it
// does not ask.
func TestLeaderAsksBound(t *testing.T) {
	lead, l, cfg := newTestLeader(t)
	now := time.Unix(1000, 0)
	in := leaderInput(l)
	in.Cluster.Version = ledger.VersionLeaseRenewals
	lead.Step(now, LeadershipChanged{Leading: true})
	if rd := lead.Step(now, Barriered{In: in}); !rd.Established || !rd.Bound.Equal(now) {
		t.Fatalf("version 4 not yet seen by this process: %+v, want a term at now", rd)
	}
	lead.Step(now, LeadershipChanged{Leading: false})
	lead.Step(now, LeadershipChanged{Leading: true})
	since := now.Add(-time.Hour)
	rd := lead.Step(now, Barriered{In: in, RenewalsSince: since})
	if !rd.AskBound || rd.Established {
		t.Fatalf("version 4: %+v, want AskBound", rd)
	}
	confirm := now.Add(-cfg.Lease / 2)
	rd = lead.Step(now.Add(time.Second), BoundFound{Confirm: confirm})
	if !rd.Established || !rd.Bound.Equal(confirm) {
		t.Fatalf("bound found: %+v, want a term at bound %v", rd, confirm)
	}
	if lead.planner.establishedAt != now {
		t.Fatalf("established at %v, want the clock read after the barrier (%v)", lead.planner.establishedAt, now)
	}
}

func TestEstablishBound(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	for _, c := range []struct {
		name                  string
		since, confirm, bound time.Time
	}{
		{"not seen", time.Time{}, at(-time.Second), now},
		{"confirms", at(-time.Hour), at(-time.Second), at(-time.Second)},
		{"no earlier than version 4", at(-time.Second), at(-time.Hour), at(-time.Second)},
		{"no later than now", at(-time.Hour), at(time.Second), now},
	} {
		if got := EstablishBound(now, c.since, c.confirm); !got.Equal(c.bound) {
			t.Errorf("%s: EstablishBound = %v, want %v", c.name, got.Sub(now), c.bound.Sub(now))
		}
	}
}

func TestVotersBound(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	for _, c := range []struct {
		name   string
		seen   []time.Time
		voters int
		bound  time.Time
	}{
		{"no answers", nil, 3, now},
		{"no quorum of 3", []time.Time{at(-time.Second)}, 3, now},
		{"no quorum of 4", []time.Time{at(-time.Second), at(-2 * time.Second)}, 4, now},
		{"the latest of a quorum", []time.Time{at(-2 * time.Second), at(-time.Second)}, 3, at(-time.Second)},
		{"no later than now", []time.Time{at(-time.Second), at(time.Second)}, 3, now},
		{"one voter", []time.Time{at(-time.Minute)}, 1, at(-time.Minute)},
	} {
		if got := VotersBound(now, c.seen, c.voters); !got.Equal(c.bound) {
			t.Errorf("%s: VotersBound = %v, want %v", c.name, got.Sub(now), c.bound.Sub(now))
		}
	}
}
