package ledger

// VersionStreamMembers is the cluster version from which members
// (--voter=never) leave Raft and follow the committed-state stream the
// voters serve (cluster.ControlConfig.StreamActive, docs/control-group.md):
// once it is active the control-group leader removes them from the Raft
// configuration and no longer adds them; they apply the entries a voter
// applied, in log order, to their replica. It adds no command and no
// encoding: the stream carries the log's entries and the snapshot encoding
// as they are.
const VersionStreamMembers uint32 = 5
