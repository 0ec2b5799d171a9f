package ledger

import "github.com/tenurehq/tenure/internal/mutation"

// VersionHandoffWords is the cluster version from which a planned move can
// hand over on the old owner's word (docs/guarantees.md, "Handoff on the
// old owner's word"): the target T of a Revoke may act at epoch e+1 before
// the Transfer commits, on a word relayed to it by the control-group
// leader that received the old owner's Transfer over its authenticated
// RPC. From this version the ledger burns e+1 when a shard that was
// Revoking toward a target leaves its owner other than by the Transfer
// (HandoffEpoch), so a token T may have used on a word is never issued to
// anyone else. It adds no command and no encoding: a Grant's and a
// Release's effect changes, so it is gated like any rule (State.
// VersionActive). A cluster reaches it when every node holding a lease
// runs a binary that speaks it and the leader finalizes (docs/upgrades.md);
// until then every rule here is as in version 5.
const VersionHandoffWords uint32 = 6

// HandoffEpoch is the epoch a shard gets when it leaves rec other than by
// the Transfer that names rec.Target: the next Grant's epoch (grant), or
// the epoch a Release leaves it at (!grant). Before VersionHandoffWords
// (words false), or when rec was not Revoking toward a target, that is
// today's rule: a Grant moves to rec.Epoch+1 and a Release keeps
// rec.Epoch. Otherwise the target may have acted at rec.Epoch+1 on the old
// owner's word, so that epoch is burned: a Release leaves the shard at
// rec.Epoch+1 (Unowned) and a Grant gives rec.Epoch+2. (The FSM refuses
// such a Release from VersionHandoffWords, so at version 6 only the Grant
// case is reached; the Release case stays for the rule's completeness.)
// This is rule 2 of the handoff on a word; the one place it is decided.
func HandoffEpoch(rec ShardRecord, words, grant bool) uint64 {
	burn := words && rec.State == ShardRevoking && rec.Target != "" && !mutation.On(mutation.NoWordBurn)
	switch {
	case burn && grant:
		return rec.Epoch + 2
	case burn:
		return rec.Epoch + 1
	case grant:
		return rec.Epoch + 1
	}
	return rec.Epoch
}
