package tier2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/node"
)

// FaultKind names a fault.
type FaultKind int

// The faults. Each lasts Fault.For and is then undone; faults run one at a
// time.
const (
	// Crash: the node's network endpoints vanish and it stops without
	// draining or leaving; after For it restarts with the same storage
	// and the next incarnation.
	Crash FaultKind = iota + 1
	// Restart: a graceful Close (drain, leave), then a start For later
	// (one step of a rolling restart).
	Restart
	// Isolate: the node is cut off both networks, both ways. This is also
	// how tier 2 models a process pause longer than the lease: the real
	// goroutines cannot be frozen, so the node keeps running its own lease
	// clock (tier 1 models a true pause).
	Isolate
	// OneWay: everything Node sends to To is dropped on both networks (an
	// asymmetric partition); To's messages still arrive.
	OneWay
	// Degrade: every link delays messages by Delay (plus up to Delay of
	// Raft jitter) and loses a fraction Loss of them.
	Degrade
	// Drain: the node drains (hands its shards over) and undrains after For.
	Drain
	// DrainLeaderChange: the node drains while the control group's leader
	// is isolated for For (Node must not be the leader: another node is
	// picked if it is).
	DrainLeaderChange
	// DrainIsolate: the node starts draining and is cut off both networks
	// right after, so it cannot hand its shards over (a partition
	// mid-handoff); the control group takes them over after the drain
	// timeout.
	DrainIsolate
	// Freeze: the node's host stops answering without closing anything —
	// a dead or frozen machine as its peers see it: gossip is cut, Raft
	// messages and bytes on open RPC streams vanish, dials hang (no TCP
	// reset, unlike Isolate). The process itself keeps running, as with
	// Isolate.
	Freeze
	// Unhealthy: the node reports a health score below the minimum
	// (node.SetHealth) for For, so its shards are handed over, then
	// recovers.
	Unhealthy
)

var faultNames = [...]string{"", "crash", "restart", "isolate", "one-way", "degrade", "drain", "drain-leader-change", "drain-isolate", "freeze", "unhealthy"}

// String names the kind.
func (k FaultKind) String() string {
	if k < 1 || int(k) >= len(faultNames) {
		return fmt.Sprintf("FaultKind(%d)", int(k))
	}
	return faultNames[k]
}

// Node selectors besides a slot index (0..Nodes-1).
const (
	// Leader selects the control group's leader when the fault starts.
	Leader = -1
	// Shard0Owner selects the committed owner of shard 0.
	Shard0Owner = -2
	// FollowerOwner selects the owner of the lowest-numbered shard whose
	// owner is not the control group's leader: a fault on it leaves a
	// leader that can act on the fault at once (a fault on a leader that
	// owns the shard costs an election first).
	FollowerOwner = -3
)

// Fault is one injected fault.
type Fault struct {
	// At is when it starts (virtual time since the run started); a fault
	// whose At has passed starts when the previous one ends.
	At   time.Duration
	Kind FaultKind
	// Node is a slot index, Leader, Shard0Owner or FollowerOwner; To is
	// OneWay's target.
	Node, To int
	// For is how long the fault lasts.
	For time.Duration
	// Delay and Loss configure Degrade.
	Delay time.Duration
	Loss  float64
	// Resolved is the node id the fault hit (filled in Result.Faults).
	Resolved string
}

func (f Fault) String() string {
	who := f.Resolved
	if who == "" {
		who = fmt.Sprint(f.Node)
	}
	switch f.Kind {
	case OneWay:
		return fmt.Sprintf("%v %s %s->n%d for %v", f.At, f.Kind, who, f.To+1, f.For)
	case Degrade:
		return fmt.Sprintf("%v %s delay %v loss %.2f for %v", f.At, f.Kind, f.Delay, f.Loss, f.For)
	}
	return fmt.Sprintf("%v %s %s for %v", f.At, f.Kind, who, f.For)
}

func (f Fault) validate(nodes int) error {
	if f.Kind < Crash || f.Kind > Unhealthy {
		return fmt.Errorf("unknown Kind %d", int(f.Kind))
	}
	if f.Node < FollowerOwner || f.Node >= nodes {
		return fmt.Errorf("fault node %d: want 0..%d, Leader, Shard0Owner or FollowerOwner", f.Node, nodes-1)
	}
	if f.Kind == OneWay && (f.To < 0 || f.To >= nodes) {
		return fmt.Errorf("fault to %d: want 0..%d", f.To, nodes-1)
	}
	if f.For < 0 || f.Loss < 0 || f.Loss > 1 || f.Delay < 0 {
		return fmt.Errorf("fault for %v, delay %v, loss %v: want For, Delay ≥ 0 and Loss in [0,1]", f.For, f.Delay, f.Loss)
	}
	return nil
}

// randomFaults draws a schedule in [from, until) from the seed.
func (h *harness) randomFaults(from, until time.Duration) []Fault {
	var out []Fault
	at := from
	for {
		at += h.between(200*time.Millisecond, 3*time.Second)
		d := h.between(500*time.Millisecond, 6*time.Second)
		if at+d > until-time.Second {
			return out
		}
		f := Fault{At: at, For: d, Node: h.intn(h.sc.Nodes)}
		switch r := h.intn(100); {
		case r < 20:
			f.Kind = Crash
		case r < 28:
			f.Kind, f.Node = Crash, Leader
		case r < 36:
			f.Kind = Restart
		case r < 44:
			f.Kind = Isolate
		case r < 50:
			f.Kind = Freeze
		case r < 54:
			f.Kind, f.Node = Isolate, Leader
		case r < 58:
			f.Kind, f.Node = Freeze, Leader
		case r < 70:
			f.Kind = OneWay
			f.To = (f.Node + 1 + h.intn(max(h.sc.Nodes-1, 1))) % h.sc.Nodes
		case r < 82:
			f.Kind = Degrade
			f.Delay = h.between(0, 40*time.Millisecond)
			f.Loss = h.float() * 0.2
		case r < 86:
			f.Kind = Drain
		case r < 90:
			f.Kind = Unhealthy
		case r < 95:
			f.Kind = DrainIsolate
		default:
			f.Kind = DrainLeaderChange
		}
		out = append(out, f)
		at += d
	}
}

// runFaults applies faults one after the other, each for its duration.
func (h *harness) runFaults(faults []Fault) {
	for _, f := range faults {
		if !h.sleepUntil(f.At) {
			return
		}
		f.At = h.rec.now()
		h.apply(&f)
		h.mu.Lock()
		h.faults = append(h.faults, f)
		h.mu.Unlock()
	}
}

// pick resolves a node selector to a slot, nil if none is running.
func (h *harness) pick(sel int) *slot {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch sel {
	case Leader, Shard0Owner, FollowerOwner:
		var id string
		for _, s := range h.slots {
			if s.n == nil {
				continue
			}
			leader := ""
			for _, m := range s.n.Members() {
				if m.Leader {
					leader = m.ID
				}
			}
			switch sel {
			case Leader:
				id = leader
			case Shard0Owner:
				id = s.n.Shard(0).Owner
			case FollowerOwner:
				if leader == "" {
					continue
				}
				for _, sh := range s.n.Shards() { // by shard number
					if sh.Owner != "" && sh.Owner != leader {
						id = sh.Owner
						break
					}
				}
			}
			if id != "" {
				break
			}
		}
		for _, s := range h.slots {
			if s.id == id && s.n != nil {
				return s
			}
		}
		return nil
	}
	if s := h.slots[sel]; s.n != nil {
		return s
	}
	return nil
}

func (h *harness) isolate(s *slot) {
	h.tr.Gossip.Partition([]string{s.gossip})
	h.tr.Raft.Isolate(s.raft)
}

// apply runs one fault to its end.
func (h *harness) apply(f *Fault) {
	s := h.pick(f.Node)
	if s == nil && f.Kind != Degrade {
		return
	}
	if s != nil {
		f.Resolved = s.id
	}
	switch f.Kind {
	case Crash:
		h.crash(s)
		h.sleep(f.For)
		h.restart(s)
	case Restart:
		h.closeGracefully(s)
		h.sleep(f.For)
		h.restart(s)
	case Isolate:
		h.isolate(s)
		h.sleep(f.For)
		h.heal()
	case Unhealthy:
		h.mu.Lock()
		n := s.n
		h.mu.Unlock()
		if n == nil {
			return
		}
		_ = n.SetHealth(0.2, map[string]string{"fault": "unhealthy"})
		h.sleep(f.For)
		_ = n.SetHealth(1, nil)
	case Freeze:
		h.tr.Gossip.Partition([]string{s.gossip})
		h.tr.Raft.Blackhole(s.raft)
		h.sleep(f.For)
		h.heal()
	case OneWay:
		to := h.slots[f.To]
		h.tr.Gossip.Cut(s.gossip, to.gossip)
		h.tr.Raft.Cut(s.raft, to.raft)
		h.sleep(f.For)
		h.heal()
	case Degrade:
		h.tr.Gossip.SetDefaultLink(f.Delay, f.Loss)
		h.tr.Raft.SetDefaultLink(cluster.Link{Delay: f.Delay, Jitter: f.Delay, Loss: f.Loss})
		h.sleep(f.For)
		h.heal()
	case Drain:
		h.drainFor(s, f.For, nil)
	case DrainIsolate:
		h.drainFor(s, f.For, func() { h.isolate(s) })
	case DrainLeaderChange:
		leader := h.pick(Leader)
		if leader == s {
			s = h.slots[(s.i+1)%len(h.slots)]
			if s.n == nil {
				return
			}
			f.Resolved = s.id
		}
		h.drainFor(s, f.For, func() {
			if leader != nil {
				h.isolate(leader)
			}
		})
		h.heal()
	}
}

// drainFor drains s for d (calling during right after the drain started),
// then undrains it.
func (h *harness) drainFor(s *slot, d time.Duration, during func()) {
	h.mu.Lock()
	n := s.n
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(h.ctx, d)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Drain(ctx)
	}()
	if during != nil {
		during()
	}
	<-ctx.Done()
	<-done
	h.heal()
	// Undrain commits through Raft; retry while the cluster recovers.
	for h.ctx.Err() == nil {
		uctx, ucancel := context.WithTimeout(h.ctx, 2*time.Second)
		err := n.Undrain(uctx)
		ucancel()
		if err == nil || errors.Is(err, node.ErrClosed) {
			return
		}
	}
}
