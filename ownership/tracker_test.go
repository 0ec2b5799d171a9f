package ownership

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/tenurehq/tenure/ledger"
)

// TestTrackerScripts runs the tracker scripts in testdata/tracker. The
// tracker is node n1, incarnation 1 unless `init` says otherwise.
//
//	init [id=N] [inc=I]
//	ask t=D                                  print the heartbeat and its token
//	ack token=K index=I live=L t=D           accepted, record at liveness L
//	reject token=K inc=I live=L t=D
//	fail token=K
//	applied index=I
//	node id=N inc=I live=L [draining]       replica applied a node record
//	shard s=S owner=N e=E inc=I live=L state=owned|revoking|unowned [target=N] t=D
//	drained s=S e=E
//	acting t=D                               acting shards and lease end
//	changes t=D
//	handoffs t=D
func TestTrackerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/tracker", func(t *testing.T, path string) {
		tr, _ := NewTracker(TestConfig(), "n1", 1)
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			at := t0.Add(argDur(t, td, "t", 0))
			switch td.Cmd {
			case "init":
				var err error
				tr, err = NewTracker(TestConfig(), argStr(td, "id", "n1"), uint64(argInt(t, td, "inc", 1)))
				if err != nil {
					t.Fatal(err)
				}
				return ""
			case "ask":
				tok, hb := tr.HeartbeatAsked(at)
				return fmt.Sprintf("token %d: %s\n", tok, FormatCommand(hb))
			case "ack":
				tr.HeartbeatAcked(uint64(argInt(t, td, "token", 0)), uint64(argInt(t, td, "index", 0)),
					ledger.NodeRecord{ID: tr.ID(), Incarnation: tr.Incarnation(), Liveness: uint64(argInt(t, td, "live", 1))}, at)
				return ""
			case "reject":
				tr.HeartbeatRejected(uint64(argInt(t, td, "token", 0)),
					ledger.NodeRecord{ID: tr.ID(), Incarnation: uint64(argInt(t, td, "inc", 1)), Liveness: uint64(argInt(t, td, "live", 1))}, at)
				return ""
			case "fail":
				tr.HeartbeatFailed(uint64(argInt(t, td, "token", 0)))
				return ""
			case "applied":
				tr.Applied(uint64(argInt(t, td, "index", 0)))
				return ""
			case "node":
				tr.ObserveNode(ledger.NodeRecord{ID: argStr(td, "id", "n1"), Incarnation: uint64(argInt(t, td, "inc", 1)),
					Liveness: uint64(argInt(t, td, "live", 1)), Draining: td.HasArg("draining")})
				return ""
			case "shard":
				st := map[string]ledger.ShardState{"unowned": ledger.ShardUnowned, "owned": ledger.ShardOwned, "revoking": ledger.ShardRevoking}[argStr(td, "state", "owned")]
				tr.ObserveShard(at, ledger.ShardRecord{Shard: uint32(argInt(t, td, "s", 0)), Epoch: uint64(argInt(t, td, "e", 1)),
					Owner: argStr(td, "owner", "n1"), OwnerIncarnation: uint64(argInt(t, td, "inc", 1)),
					OwnerLiveness: uint64(argInt(t, td, "live", 1)), State: st, Target: argStr(td, "target", "")})
				return ""
			case "drained":
				tr.Drained(uint32(argInt(t, td, "s", 0)), uint64(argInt(t, td, "e", 1)))
				return ""
			case "acting":
				end := "none"
				if !tr.LeaseEnd().IsZero() {
					end = tr.LeaseEnd().Sub(t0).String()
				}
				return fmt.Sprintf("acting %v lease-end %s live %d fenced %t\n", tr.ActingShards(at), end, tr.Liveness(), tr.Fenced())
			case "changes":
				var b strings.Builder
				for _, c := range tr.Changes(at) {
					fmt.Fprintf(&b, "s%d e%d acting=%t draining=%t", c.Shard, c.Epoch, c.Acting, c.Draining)
					if c.Acting {
						fmt.Fprintf(&b, " deadline=%s", c.Deadline.Sub(t0))
					}
					b.WriteString("\n")
				}
				return b.String()
			case "handoffs":
				var b strings.Builder
				for _, c := range tr.Handoffs(at) {
					b.WriteString(FormatCommand(c) + "\n")
				}
				return b.String()
			}
			t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
			return ""
		})
	})
}
