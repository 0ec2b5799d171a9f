// Package identity is who is on each end of the control group's port:
//
//   - this node: its id and its incarnation, kept in the data dir and
//     bumped on every process start (node.go);
//   - a peer: the role its certificate proves (Peer, Role) and the
//     authenticator that proves it over TLS (peer.go);
//   - whether a proven peer is still allowed: the committed deny-list,
//     checked at the handshake and at every later use of the connection
//     (Revocation, revoke.go);
//   - what a proven node may send over Raft: the Raft message guard, a
//     pure decision (decideRaft) over each decoded message and this node's
//     view of Raft (Guard, raftguard.go).
//
// The rounds that prove gossiped members and vouch for an unknown leader
// call other nodes, so they run in cluster (proof.go, raftvouch.go) and use
// this package's pieces.
//
// It must not: import cluster, nor decide anything about ownership.
package identity
