// Package member holds what every layer says about a cluster member and
// must agree on: gossip's opinion of it (State). cluster (which produces
// it), ownership (whose planner reads it) and node (which shows it) alias
// this one type, so there is nothing to convert and nothing to keep in
// the same order. It imports nothing of tenure's.
package member

import "strconv"

// State is gossip's opinion of a member. Gossip is a hint: the planner uses
// it for placement only, never to decide that a lease has ended.
type State uint8

// The member states.
const (
	// Alive: the member answers gossip probes.
	Alive State = iota
	// Suspect: probes failed recently; it may be dead.
	Suspect
	// Dead: the member failed without leaving.
	Dead
	// Left: the member left gracefully.
	Left
)

// Up reports whether gossip shows the member running: alive, or suspect
// (probes failed recently; it may still be running).
func (s State) Up() bool { return s == Alive || s == Suspect }

// String returns the state's name: alive, suspect, dead or left.
func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}
