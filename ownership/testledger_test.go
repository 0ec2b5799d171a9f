package ownership

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/ledger"
)

// testLedger is the committed table of the planner scripts.
type testLedger struct {
	shard map[uint32]ledger.ShardRecord
	node  map[string]ledger.NodeRecord
	// fenced shards (SetTakeoverPolicy): a Takeover grant may replace a
	// valid Owned owner.
	fenced map[uint32]bool
}

func newTestLedger() *testLedger {
	return &testLedger{shard: map[uint32]ledger.ShardRecord{}, node: map[string]ledger.NodeRecord{}}
}

func (l *testLedger) shards() []ledger.ShardRecord {
	out := make([]ledger.ShardRecord, 0, len(l.shard))
	for _, r := range l.shard {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ledger.ShardRecord) int { return int(a.Shard) - int(b.Shard) })
	return out
}

func (l *testLedger) nodes() []ledger.NodeRecord {
	out := make([]ledger.NodeRecord, 0, len(l.node))
	for _, id := range sortedKeys(l.node) {
		out = append(out, l.node[id])
	}
	return out
}

var errTest = errors.New("rejected")

func (l *testLedger) heartbeat(id string, inc uint64, rejoin bool) string {
	n, ok := l.node[id]
	switch {
	case !ok:
		n = ledger.NodeRecord{ID: id, Incarnation: inc, Liveness: 1, Seq: 1}
	case inc > n.Incarnation:
		n = ledger.NodeRecord{ID: id, Incarnation: inc, Liveness: n.Liveness + 1, Seq: n.Seq + 1}
	case inc == n.Incarnation:
		n.Seq++
	default:
		return "stale incarnation\n"
	}
	l.node[id] = n
	return ""
}

func (l *testLedger) validRec(r ledger.ShardRecord) bool {
	n, ok := l.node[r.Owner]
	return ledger.OwnershipValidWith(r, n, ok)
}

func (l *testLedger) apply(c ledger.Command) error {
	switch c := c.(type) {
	case ledger.ExpireNode:
		n := l.node[c.Node]
		if n.Incarnation != c.Incarnation || n.Liveness != c.Liveness || n.Seq != c.Seq {
			return fmt.Errorf("%w: conflict", errTest)
		}
		n.Liveness++
		l.node[c.Node] = n
	case ledger.Grant:
		r := l.shard[c.Shard]
		r.Shard = c.Shard
		if r.Epoch != c.ExpectedEpoch {
			return fmt.Errorf("%w: stale epoch", errTest)
		}
		if l.validRec(r) && !(c.Takeover && r.State == ledger.ShardRevoking) && !(c.Takeover && r.State == ledger.ShardOwned && l.fenced[c.Shard]) {
			return fmt.Errorf("%w: owned", errTest)
		}
		to := l.node[c.Owner]
		if to.Incarnation != c.OwnerIncarnation || to.Liveness != c.OwnerLiveness {
			return fmt.Errorf("%w: new owner stale", errTest)
		}
		avoid := r.AvoidOwner
		if avoid == c.Owner {
			avoid = ""
		}
		l.shard[c.Shard] = ledger.ShardRecord{Shard: c.Shard, Epoch: r.Epoch + 1, Owner: c.Owner,
			OwnerIncarnation: c.OwnerIncarnation, OwnerLiveness: c.OwnerLiveness, State: ledger.ShardOwned, Reason: c.Reason,
			AvoidOwner: avoid}
	case ledger.Revoke:
		r := l.shard[c.Shard]
		if r.Epoch != c.Epoch || r.State != ledger.ShardOwned || !l.validRec(r) {
			return fmt.Errorf("%w: not owned at epoch", errTest)
		}
		r.State, r.Target, r.Reason = ledger.ShardRevoking, c.Target, c.Reason
		l.shard[c.Shard] = r
	default:
		return fmt.Errorf("%w: unsupported %T", errTest, c)
	}
	return nil
}

func (l *testLedger) handoff(s uint32, transfer bool) string {
	r := l.shard[s]
	if r.State != ledger.ShardRevoking {
		return "not revoking\n"
	}
	if transfer && r.Target != "" {
		to := l.node[r.Target]
		l.shard[s] = ledger.ShardRecord{Shard: s, Epoch: r.Epoch + 1, Owner: to.ID, OwnerIncarnation: to.Incarnation,
			OwnerLiveness: to.Liveness, State: ledger.ShardOwned, Reason: "transfer"}
		return ""
	}
	r.State, r.Target = ledger.ShardUnowned, ""
	l.shard[s] = r
	return ""
}

// resign is the owner's Release{Avoid: true}.
func (l *testLedger) resign(s uint32) string {
	r := l.shard[s]
	if r.State == ledger.ShardUnowned || !l.validRec(r) {
		return "not owned\n"
	}
	r.State, r.Target, r.AvoidOwner = ledger.ShardUnowned, "", r.Owner
	l.shard[s] = r
	return ""
}

func (l *testLedger) table() string {
	var b strings.Builder
	for _, r := range l.shards() {
		valid := ""
		if (r.State == ledger.ShardOwned || r.State == ledger.ShardRevoking) && !l.validRec(r) {
			valid = " INVALID"
		}
		state := [...]string{"unowned", "owned", "revoking"}[r.State]
		avoid := ""
		if r.AvoidOwner != "" {
			avoid = " avoid=" + r.AvoidOwner
		}
		fmt.Fprintf(&b, "s%d e%d %s %s%s%s\n", r.Shard, r.Epoch, r.Owner, state, valid, avoid)
	}
	return b.String()
}
