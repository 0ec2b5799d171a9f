package gossip

import "github.com/tenurehq/tenure/member"

// This file is the contract between membership (gossip) and its readers (the
// control group, ownership, node). Fields may be added; meanings must not
// change.

// Meta is the metadata every node gossips about itself. Its encoding (see
// meta.go) is versioned and must stay within memberlist's 512-byte limit.
type Meta struct {
	ID          string            // stable node id
	Group       string            // group the node belongs to (CLUSTER_NAME)
	Incarnation uint64            // process incarnation (persisted counter)
	Health      float64           // 0..1
	Draining    bool              // the node asked to be drained
	Leaving     bool              // the node is leaving gracefully; its disappearance is a leave, not a failure
	RaftAddr    string            // host:port of the Raft transport (RPC is multiplexed on it)
	HTTPAddr    string            // host:port of the HTTP API, "" if none
	Version     string            // software version
	Tags        map[string]string // free-form labels
}

// MemberState is gossip's view of a member (the one definition is
// member.State).
type MemberState = member.State

// The member states.
const (
	StateAlive   = member.Alive
	StateSuspect = member.Suspect
	StateDead    = member.Dead // failed without leaving
	StateLeft    = member.Left // left gracefully
)

// Member is one node as gossip sees it.
type Member struct {
	Meta
	Addr  string // gossip address host:port
	State MemberState
}

// EventKind is the kind of membership change.
type EventKind uint8

const (
	EventJoin EventKind = iota + 1
	EventUpdate
	EventFailed // dead without leaving
	EventLeave  // left gracefully
	EventReap   // a dead or left member was forgotten after Config.ReapTimeout
)

// Event is one membership change, delivered in coalesced batches.
type Event struct {
	Kind   EventKind
	Member Member
}
