package simulation

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

// FaultKind names a fault.
type FaultKind uint8

// Faults. Node selects the victim (-1 for the current control-group
// leader at the time of the fault); Dur is how long it lasts.
const (
	// Crash kills the process; it restarts after Dur with a new incarnation.
	Crash FaultKind = iota + 1
	// CrashSameIncarnation restarts with the same incarnation.
	CrashSameIncarnation
	// Pause freezes the process for Dur (GC, SIGSTOP); its clock runs on.
	Pause
	// Isolate cuts every link to and from the node for Dur.
	Isolate
	// OneWay cuts only the node's outgoing links for Dur (asymmetric).
	OneWay
	// ClockRate sets the node's clock rate to Value (1 = exact).
	ClockRate
	// ClockJump steps the node's wall clock by Dur (monotonic time is
	// unaffected, as on a real system).
	ClockJump
	// Drain drains the node for Dur.
	Drain
	// Health sets the node's health to Value for Dur.
	Health
	// Suspect makes every voter falsely suspect the node for Dur.
	Suspect
	// SlowApply stalls the node's replica (slow disk) for Dur.
	SlowApply
	// Join adds a new node (Node is ignored).
	Join
	// PauseInFlight pauses the node for Dur right after its next heartbeat
	// is sent: the process stalls between a request and its response.
	PauseInFlight
	// CutVoters cuts the links both ways between the node and every other
	// voter for Dur; its links to non-voters stay. Cut the leader and a
	// non-voter together: the old leader, deposed, keeps receiving that
	// node's renewals while the other voters elect a new one.
	CutVoters
	// DuringRevoke arms the node: when a leader next proposes a Revoke
	// toward a target of a shard the node owns, then — while that Revoke is
	// in flight, before the node can hand the shard over — the node
	// resigns the shard (Value 0: the application resigns, a Release;
	// Dur > 0 resigns Dur later instead, when the old owner may have told
	// its word), crashes for Dur (Value 1), or the proposing leader
	// crashes for Dur (Value 2: a leader change). Never drawn by
	// GenerateFaults.
	DuringRevoke
	numFaultKinds
)

// numRandomFaultKinds bounds the kinds GenerateFaults draws (the kinds
// after it are scenario faults; adding them keeps every seed's faults).
const numRandomFaultKinds = CutVoters + 1

// What a DuringRevoke fault does (its Value).
const (
	RevokeResign      = 0
	RevokeCrashOwner  = 1
	RevokeCrashLeader = 2
)

var faultNames = [...]string{"", "crash", "crash-same-inc", "pause", "isolate", "one-way", "clock-rate",
	"clock-jump", "drain", "health", "suspect", "slow-apply", "join", "pause-in-flight", "cut-voters", "during-revoke"}

// String names the kind.
func (k FaultKind) String() string {
	if k == 0 || k >= numFaultKinds {
		return "unknown"
	}
	return faultNames[k]
}

// ParseFaultKind parses a kind name.
func ParseFaultKind(s string) (FaultKind, error) {
	for i, n := range faultNames {
		if n == s && i > 0 {
			return FaultKind(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown fault %q", ErrInvalidConfig, s)
}

// Special victims of a Fault.
const (
	LeaderNode = -1 // the control-group leader when the fault starts
	OwnerOf    = -2 // the committed owner of Fault.Shard when the fault starts
)

// Fault is one scheduled fault.
type Fault struct {
	At   time.Duration
	Kind FaultKind
	// Node is the victim's index; -1 = the control-group leader at At;
	// OwnerOf = the committed owner of shard Shard at At.
	Node  int
	Shard uint32
	Dur   time.Duration
	Value float64
}

// String renders the fault in one line ("2s pause owner:0 for 3s").
func (f Fault) String() string {
	who := fmt.Sprintf("n%d", f.Node+1)
	switch f.Node {
	case LeaderNode:
		who = "leader"
	case OwnerOf:
		who = fmt.Sprintf("owner:%d", f.Shard)
	}
	if f.Kind == Join {
		who = "new"
	}
	s := fmt.Sprintf("%v %s %s", f.At, f.Kind, who)
	if f.Dur != 0 {
		s += fmt.Sprintf(" for %v", f.Dur)
	}
	if f.Kind == ClockRate || f.Kind == Health || f.Kind == DuringRevoke {
		s += fmt.Sprintf(" value %.3f", f.Value)
	}
	return s
}

// FormatFaults renders a schedule one fault per line.
func FormatFaults(fs []Fault) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

// GenerateFaults draws a fault schedule from cfg.Seed: a few faults of
// every kind in [0, FaultsUntil), with durations from short to longer than
// the lease. It uses its own random stream, so that the schedule can be
// shrunk without disturbing it.
func GenerateFaults(cfg Config) []Fault {
	r := rand.New(rand.NewPCG(cfg.Seed^0x5eed, cfg.Seed))
	until := int64(cfg.FaultsUntil)
	if until <= 0 {
		return nil
	}
	lease := cfg.Ownership.Lease
	n := 2 + r.IntN(6)
	if cfg.Stress {
		n = 8 + r.IntN(10)
	}
	var fs []Fault
	for range n {
		f := Fault{At: time.Duration(r.Int64N(until)), Node: r.IntN(cfg.Nodes)}
		if r.IntN(5) == 0 {
			f.Node = -1
		}
		f.Kind = FaultKind(1 + r.IntN(int(numRandomFaultKinds-1)))
		if cfg.Stress && r.IntN(3) == 0 {
			// Stress: more of what breaks leases — pauses, slow replicas,
			// drains and leader crashes.
			f.Kind = []FaultKind{Pause, SlowApply, Drain, Crash, PauseInFlight}[r.IntN(5)]
			if f.Kind == Crash || r.IntN(2) == 0 {
				f.Node = -1
			}
		}
		// Durations: half shorter than the lease, half up to 3 leases.
		if r.IntN(2) == 0 {
			f.Dur = time.Duration(r.Int64N(int64(lease)))
		} else {
			f.Dur = lease + time.Duration(r.Int64N(int64(2*lease)))
		}
		switch f.Kind {
		case ClockRate:
			f.Value = 1 + (r.Float64()*2-1)*cfg.ClockRateError
			f.Dur = 0
		case ClockJump:
			f.Dur = time.Duration(r.Int64N(int64(20*time.Second))) - 10*time.Second
		case Health:
			f.Value = r.Float64() * 0.5
		case Join:
			f.Node = 0
			f.Dur = 0
		}
		fs = append(fs, f)
	}
	slices.SortStableFunc(fs, func(a, b Fault) int { return int(a.At - b.At) })
	return fs
}

// victim resolves a fault's node.
func (s *Sim) victim(f Fault) *node {
	if f.Node == OwnerOf {
		rec, ok := s.raft.ref.State().Shard(f.Shard)
		if !ok {
			return nil
		}
		for _, n := range s.nodes {
			if n.id == rec.Owner {
				return n
			}
		}
		return nil
	}
	if f.Node < 0 {
		if s.raft.leader < 0 {
			return nil
		}
		return s.nodes[s.raft.leader]
	}
	if f.Node >= len(s.nodes) {
		return nil
	}
	return s.nodes[f.Node]
}

// applyFault injects fault i.
func (s *Sim) applyFault(i int, f Fault) {
	if f.Kind == Join {
		if len(s.nodes) >= 64 {
			return
		}
		if err := s.addNode(false); err != nil {
			return
		}
		n := s.nodes[len(s.nodes)-1]
		s.gossip.grow()
		s.tracef("fault %d: join %s", i, n.id)
		s.start(n, false)
		return
	}
	n := s.victim(f)
	if n == nil {
		return
	}
	s.tracef("fault %d: %s on %s", i, f, n.id)
	switch f.Kind {
	case Crash, CrashSameIncarnation:
		if !n.up {
			return
		}
		s.crash(n)
		gen := n.gen
		s.after(f.Dur, evFault, n.idx, func() {
			if !n.up && n.gen == gen {
				s.start(n, f.Kind == CrashSameIncarnation)
			}
		})
	case Pause:
		if !n.up {
			return
		}
		n.pausedUntil = max(n.pausedUntil, s.now+int64(f.Dur))
		s.raft.checkLeader()
		s.gossip.changed(n)
		s.after(f.Dur, evFault, n.idx, func() {
			s.raft.checkLeader()
			s.gossip.changed(n)
			s.scheduleSync(n, time.Millisecond)
		})
	case Isolate, OneWay, CutVoters:
		s.gossip.grow()
		cut := func(m *node) bool { return m != n && (f.Kind != CutVoters || m.voter) }
		for _, m := range s.nodes {
			if cut(m) {
				s.gossip.cut[n.idx][m.idx]++
				if f.Kind != OneWay {
					s.gossip.cut[m.idx][n.idx]++
				}
			}
		}
		s.linksChanged()
		s.after(f.Dur, evFault, n.idx, func() {
			if s.healed {
				return
			}
			for _, m := range s.nodes {
				if cut(m) && m.idx < len(s.gossip.cut[n.idx]) {
					s.gossip.cut[n.idx][m.idx] = max(s.gossip.cut[n.idx][m.idx]-1, 0)
					if f.Kind != OneWay {
						s.gossip.cut[m.idx][n.idx] = max(s.gossip.cut[m.idx][n.idx]-1, 0)
					}
				}
			}
			s.linksChanged()
		})
	case ClockRate:
		n.setRate(s.now, f.Value)
	case ClockJump:
		n.wallOffset += int64(f.Dur)
	case Drain:
		s.setDraining(n, true)
		s.after(f.Dur, evFault, n.idx, func() {
			if !s.healed {
				s.setDraining(n, false)
			}
		})
	case Health:
		n.health = f.Value
		s.gossip.changed(n)
		s.after(f.Dur, evFault, n.idx, func() { n.health = 1; s.gossip.changed(n) })
	case Suspect:
		s.gossip.grow()
		for _, o := range s.nodes {
			if o.voter {
				s.gossip.suspect[o.idx][n.idx]++
			}
		}
		s.gossip.changed(n)
		s.after(f.Dur, evFault, n.idx, func() {
			if s.healed {
				return
			}
			for _, o := range s.nodes {
				if o.voter {
					s.gossip.suspect[o.idx][n.idx] = max(s.gossip.suspect[o.idx][n.idx]-1, 0)
				}
			}
			s.gossip.changed(n)
		})
	case SlowApply:
		n.slowTill = max(n.slowTill, s.now+int64(f.Dur))
	case PauseInFlight:
		n.pauseNext = f.Dur
	case DuringRevoke:
		armed := f
		n.duringRevoke = &armed
	}
}

// revokeProposed is the leader l proposing c: a Revoke toward a target
// of a shard whose owner (by l's replica) is armed with a DuringRevoke
// fault fires it, 0–2 ms later — the Revoke still in flight (a resign
// with a Dur: Dur later).
func (s *Sim) revokeProposed(l *node, c ledger.Command) {
	rv, ok := c.(ledger.Revoke)
	if !ok || rv.Target == "" {
		return
	}
	rec, ok := s.replica(l).Shard(rv.Shard)
	if !ok || rec.Owner == "" {
		return
	}
	var o *node
	for _, m := range s.nodes {
		if m.id == rec.Owner {
			o = m
		}
	}
	if o == nil || o.duringRevoke == nil {
		return
	}
	f := *o.duringRevoke
	o.duringRevoke = nil
	s.res.RevokeFaults++
	delay := s.jitter(0, 2*time.Millisecond)
	if int(f.Value) == RevokeResign && f.Dur > 0 {
		delay = f.Dur
	}
	s.after(delay, evFault, o.idx, func() {
		switch int(f.Value) {
		case RevokeResign:
			if !o.up || o.agent == nil {
				return
			}
			s.tracef("%s resigns shard %d at e%d while its revoke is in flight", o.id, rv.Shard, rec.Epoch)
			s.step(o, ownership.ShardResigned{Shard: rv.Shard, Epoch: rec.Epoch})
			s.raft.propose(o, ledger.Release{Shard: rv.Shard, Epoch: rec.Epoch, Owner: o.id,
				Now: o.localTime(s.now).UnixNano(), Avoid: true}, nil)
		case RevokeCrashOwner, RevokeCrashLeader:
			v := o
			if int(f.Value) == RevokeCrashLeader {
				v = l
			}
			if !v.up {
				return
			}
			s.tracef("%s crashes while the revoke of shard %d is in flight", v.id, rv.Shard)
			s.crash(v)
			gen := v.gen
			s.after(f.Dur, evFault, v.idx, func() {
				if !v.up && v.gen == gen {
					s.start(v, false)
				}
			})
		}
	})
}

// linksChanged re-evaluates raft and gossip after a partition change.
func (s *Sim) linksChanged() {
	s.raft.checkLeader()
	s.gossip.linksChanged()
	for _, n := range s.nodes {
		if n.up {
			s.scheduleSync(n, s.jitter(time.Millisecond, 5*time.Millisecond))
		}
	}
}

// setDraining drains or undrains n: gossip metadata and a committed
// SetDraining, as node/ does.
func (s *Sim) setDraining(n *node, on bool) {
	n.draining = on
	s.gossip.changed(n)
	// The agent proposes the wish and reconciles it with the node's
	// record until they agree (proposals may commit out of order).
	if n.up {
		s.step(n, ownership.DrainWish{Draining: on})
	}
}

// healAll ends every fault at FaultsUntil: crashed nodes restart, paused
// ones resume, partitions heal, health recovers, drains end, slow disks
// speed up. Clock rates stay as they are (within the bound).
func (s *Sim) healAll() {
	s.tracef("faults stop: healing everything")
	for _, row := range s.gossip.cut {
		for j := range row {
			row[j] = 0
		}
	}
	for _, row := range s.gossip.suspect {
		for j := range row {
			row[j] = 0
		}
	}
	for _, n := range s.nodes {
		if n.slowTill > s.now {
			n.slowTill = 0
			n.syncing = false // the stalled sync event fires later, harmlessly
			s.scheduleSync(n, time.Millisecond)
		}
		if n.health != 1 {
			n.health = 1
		}
		if !n.up {
			s.start(n, false)
		} else if n.pausedUntil > s.now {
			n.pausedUntil = s.now
			s.scheduleSync(n, time.Millisecond)
		}
		if n.draining {
			s.setDraining(n, false)
		}
		s.gossip.changed(n)
	}
	s.linksChanged()
	// Faults scheduled to end later must not fire after the heal.
	s.healed = true
}

// wall is n's wall clock (unix ns) now: what commands carry in Now.
func (s *Sim) wall(n *node) int64 { return n.local(s.now) + n.wallOffset }
