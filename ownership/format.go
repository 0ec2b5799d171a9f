package ownership

import (
	"fmt"

	"github.com/tenurehq/tenure/ledger"
)

// FormatCommand renders a proposal in one short line, for logs, traces and
// test scripts.
func FormatCommand(c ledger.Command) string {
	switch c := c.(type) {
	case ledger.Heartbeat:
		return fmt.Sprintf("heartbeat %s inc=%d live=%d", c.Node, c.Incarnation, c.Liveness)
	case ledger.ExpireNode:
		return fmt.Sprintf("expire %s inc=%d live=%d seq=%d", c.Node, c.Incarnation, c.Liveness, c.Seq)
	case ledger.ForgetNode:
		return fmt.Sprintf("forget %s inc=%d live=%d seq=%d", c.Node, c.Incarnation, c.Liveness, c.Seq)
	case ledger.SetDraining:
		return fmt.Sprintf("set-draining %s inc=%d draining=%t", c.Node, c.Incarnation, c.Draining)
	case ledger.Grant:
		kind := "grant"
		if c.Takeover {
			kind = "takeover"
		}
		return fmt.Sprintf("%s s%d e%d -> %s inc=%d live=%d (%s)", kind, c.Shard, c.ExpectedEpoch+1, c.Owner, c.OwnerIncarnation, c.OwnerLiveness, c.Reason)
	case ledger.Revoke:
		return fmt.Sprintf("revoke s%d e%d target=%s (%s)", c.Shard, c.Epoch, c.Target, c.Reason)
	case ledger.Release:
		return fmt.Sprintf("release s%d e%d by %s", c.Shard, c.Epoch, c.Owner)
	case ledger.Transfer:
		return fmt.Sprintf("transfer s%d e%d %s -> %s", c.Shard, c.Epoch+1, c.From, c.To)
	}
	return fmt.Sprintf("%T", c)
}
