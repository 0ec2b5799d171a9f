package ownership

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// selfV4 is n1's record as a heartbeat of this binary leaves it.
func selfV4(liveness uint64) ledger.NodeRecord {
	return ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: liveness, Seq: 1,
		MinVersion: ledger.MinClusterVersion, MaxVersion: ledger.MaxClusterVersion}
}

// registerAt runs the registration heartbeat at t0 to its ack and its
// apply, with the replica at cluster version v, and returns the Ready of
// the apply.
func registerAt(t *testing.T, a *Agent, v uint32) Ready {
	t.Helper()
	rd := a.Step(t0, Tick{})
	if rd.Heartbeat == nil || rd.Renew != nil {
		t.Fatalf("first step: heartbeat %v renew %v, want a heartbeat", rd.Heartbeat, rd.Renew)
	}
	a.Step(t0.Add(time.Millisecond), HeartbeatOutcome{Token: rd.Heartbeat.Token, Index: 1, Result: ledger.Result{Node: selfV4(1)}})
	return a.Step(t0.Add(2*time.Millisecond), Observed{Applied: 1, Nodes: []ledger.NodeRecord{selfV4(1)}, Version: v})
}

// Renewals replace heartbeats only under version 4 with a matching record;
// under version 4 the registration heartbeat's ack extends nothing and the
// agent renews at once.
func TestAgentRenewsOnlyUnderV4(t *testing.T) {
	cfg := TestConfig()
	a := newTestAgent(t)
	rd := registerAt(t, a, ledger.VersionLeaseRenewals-1)
	if rd.Renew != nil || a.Status().LeaseEnd.IsZero() {
		t.Fatalf("version 3: renew %v lease %v; want the heartbeat to extend the lease and no renewal", rd.Renew, a.Status().LeaseEnd)
	}
	if rd := a.Step(t0.Add(cfg.RenewEvery), Tick{}); rd.Heartbeat == nil || rd.Renew != nil {
		t.Fatalf("version 3 at R: heartbeat %v renew %v", rd.Heartbeat, rd.Renew)
	}

	a = newTestAgent(t)
	rd = registerAt(t, a, ledger.VersionLeaseRenewals)
	if !a.Status().LeaseEnd.IsZero() {
		t.Fatalf("version 4: a log heartbeat's ack extended the lease to %v", a.Status().LeaseEnd.Sub(t0))
	}
	if rd.Renew == nil || rd.Heartbeat != nil {
		t.Fatalf("version 4 after registration: renew %v heartbeat %v, want a renewal at once", rd.Renew, rd.Heartbeat)
	}
	if r := *rd.Renew; r.Node != "n1" || r.Incarnation != 1 || r.Liveness != 1 {
		t.Fatalf("renewal %+v", r)
	}
	// The next one is due RenewEvery later, a renewal again.
	if rd := a.Step(t0.Add(2*time.Millisecond+cfg.RenewEvery-1), Tick{}); rd.Renew != nil || rd.Heartbeat != nil {
		t.Fatal("a second ask before RenewEvery")
	}
	if rd := a.Step(t0.Add(2*time.Millisecond+cfg.RenewEvery), Tick{}); rd.Renew == nil {
		t.Fatal("no renewal at RenewEvery")
	}

	// A record that does not match (another version range: a new binary
	// must register it) keeps the agent heartbeating.
	a = newTestAgent(t)
	rd = a.Step(t0, Tick{})
	other := selfV4(1)
	other.MaxVersion = 3
	a.Step(t0.Add(time.Millisecond), HeartbeatOutcome{Token: rd.Heartbeat.Token, Index: 1, Result: ledger.Result{Node: other}})
	if rd := a.Step(t0.Add(2*time.Millisecond), Observed{Applied: 1, Nodes: []ledger.NodeRecord{other}, Version: 4}); rd.Renew != nil {
		t.Fatal("renews with a record of another version range")
	}
}

// A log heartbeat acked under version 3 but applied only after the replica
// shows version 4 extends nothing (the version when the ack would apply).
func TestAgentHeartbeatAckCrossingV4ExtendsNothing(t *testing.T) {
	a := newTestAgent(t)
	rd := a.Step(t0, Tick{})
	a.Step(t0.Add(time.Millisecond), Observed{Applied: 1, Version: 3})
	a.Step(t0.Add(2*time.Millisecond), HeartbeatOutcome{Token: rd.Heartbeat.Token, Index: 3, Result: ledger.Result{Node: selfV4(1)}})
	a.Step(t0.Add(3*time.Millisecond), Observed{Applied: 3, Nodes: []ledger.NodeRecord{selfV4(1)}, Version: 4})
	if end := a.Status().LeaseEnd; !end.IsZero() {
		t.Fatalf("lease %v after t0, want none", end.Sub(t0))
	}
}

// A renewal's ack extends the lease to ask + Lease·(1−δ) only once the
// replica applied the ack's commit index.
func TestAgentRenewalWaitsForCommitIndex(t *testing.T) {
	a := newTestAgent(t)
	rd := registerAt(t, a, 4)
	asked := t0.Add(2 * time.Millisecond)
	out := a.Step(asked.Add(time.Millisecond), RenewOutcome{Token: rd.Renew.Token, CommitIndex: 5, Record: selfV4(1)})
	if out.Verdict != VerdictAccepted {
		t.Fatalf("verdict %d", out.Verdict)
	}
	if end := a.Status().LeaseEnd; !end.IsZero() {
		t.Fatalf("lease extended before applying the commit index: %v", end.Sub(t0))
	}
	a.Step(asked.Add(2*time.Millisecond), Observed{Applied: 4, Version: 4})
	if end := a.Status().LeaseEnd; !end.IsZero() {
		t.Fatal("lease extended at applied 4 < commit index 5")
	}
	a.Step(asked.Add(3*time.Millisecond), Observed{Applied: 5, Version: 4})
	if end, want := a.Status().LeaseEnd, asked.Add(TestConfig().nodeLease()); !end.Equal(want) {
		t.Fatalf("lease end %v after t0, want %v (ask + Lease·(1−δ))", end.Sub(t0), want.Sub(t0))
	}
	// A failed renewal (the leader is expiring the node, no leader, a
	// timeout) changes nothing; the next ask is a renewal again.
	next := a.Step(asked.Add(TestConfig().RenewEvery), Tick{}).Renew
	if next == nil {
		t.Fatal("no renewal at RenewEvery")
	}
	end := a.Status().LeaseEnd
	out = a.Step(asked.Add(TestConfig().RenewEvery+time.Millisecond), RenewOutcome{Token: next.Token, Err: fmt.Errorf("x: %w", ErrExpiring)})
	if out.Verdict != VerdictFailed || !a.Status().LeaseEnd.Equal(end) || a.Status().Failing != 1 {
		t.Fatalf("failed renewal: verdict %d lease %v failing %d", out.Verdict, a.Status().LeaseEnd.Sub(t0), a.Status().Failing)
	}
}

// A renewal refused as stale is judged like a rejected heartbeat: the node
// loses its lease and registers again with a log heartbeat (rejoin), or is
// fenced for good by a newer incarnation.
func TestAgentRenewalRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  ledger.NodeRecord
		err  error
		want Verdict
	}{
		{"expired", selfV4(2), ledger.ErrStaleLiveness, VerdictExpired},
		{"fenced", ledger.NodeRecord{ID: "n1", Incarnation: 2, Liveness: 1}, ledger.ErrStaleIncarnation, VerdictFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := TestConfig()
			a := newTestAgent(t)
			rd := registerAt(t, a, 4)
			asked := t0.Add(2 * time.Millisecond)
			a.Step(asked.Add(time.Millisecond), RenewOutcome{Token: rd.Renew.Token, CommitIndex: 1, Record: selfV4(1)})
			if a.Status().LeaseEnd.IsZero() {
				t.Fatal("no lease after an applied renewal")
			}
			next := a.Step(asked.Add(cfg.RenewEvery), Tick{}).Renew
			out := a.Step(asked.Add(cfg.RenewEvery+time.Millisecond), RenewOutcome{Token: next.Token, Record: tc.rec, Err: fmt.Errorf("x: %w", tc.err)})
			if out.Verdict != tc.want {
				t.Fatalf("verdict %d, want %d", out.Verdict, tc.want)
			}
			if !a.Status().LeaseEnd.IsZero() {
				t.Fatal("the lease survives a stale rejection")
			}
			rd = a.Step(asked.Add(2*cfg.RenewEvery), Tick{})
			switch tc.want {
			case VerdictFenced:
				if rd.Heartbeat != nil || rd.Renew != nil {
					t.Fatal("a fenced agent asks again")
				}
			default:
				if rd.Renew != nil || rd.Heartbeat == nil || rd.Heartbeat.Command.Liveness != 0 {
					t.Fatalf("after expiry: renew %v heartbeat %+v, want a rejoin heartbeat", rd.Renew, rd.Heartbeat)
				}
			}
		})
	}
}
