package node

import (
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ownership"
)

// MemberState is gossip's view of a member (the one definition is
// member.State).
type MemberState = member.State

// The member states.
const (
	// MemberAlive: the member answers gossip probes.
	MemberAlive = member.Alive
	// MemberSuspect: probes failed recently; it may be dead.
	MemberSuspect = member.Suspect
	// MemberDead: the member failed without leaving.
	MemberDead = member.Dead
	// MemberLeft: the member left gracefully.
	MemberLeft = member.Left
)

// Member is one node as this node sees it: gossip's view (a hint) joined
// with the control group's committed view (Live, Voter). It is
// ownership.Member, the one type of the concept; in Node.Members, Draining
// counts the ledger's drain flag too, Weight is 1 if unset, and Load is
// the member's gossiped load summary (Node.ReportLoad), nil when it
// reports none.
type Member = ownership.Member

// Members returns every known member, sorted by id.
func (n *Node) Members() []Member { return n.be.members() }

// Candidate is a node's standing for owning shards and leading elections
// (Excalibur's CandidateHealth).
type Candidate struct {
	ID       string
	Group    string
	Health   float64
	Metadata map[string]string
	// Healthy reports Health >= the cluster's minimum health score.
	Healthy bool
	// Eligible reports whether the node may be given shards: alive, live,
	// healthy, not draining, and not a voter that owns no shards
	// (Config.VoterOwnsNoShards).
	Eligible bool
	// Leader reports whether the node leads the election Candidates was
	// called on (for Node.Candidates: whether it leads the control group).
	Leader bool
	// LastUpdate is when the node last reported in: its last committed
	// heartbeat (by its own clock) on a networked cluster, its last
	// SetHealth on a MemNetwork.
	LastUpdate time.Time
}

// Candidates returns every member's standing, sorted by id. Leader marks
// the control group's leader.
func (n *Node) Candidates() []Candidate {
	return n.candidates(func(m Member) bool { return m.Leader }, "")
}

func (n *Node) candidates(isLeader func(Member) bool, group string) []Candidate {
	var out []Candidate
	for _, m := range n.be.members() {
		if group != "" && m.Group != group {
			continue
		}
		if m.State == MemberLeft || m.State == MemberDead {
			continue
		}
		healthy := m.Health >= n.cfg.MinHealth
		out = append(out, Candidate{
			ID:         m.ID,
			Group:      m.Group,
			Health:     m.Health,
			Metadata:   maps.Clone(m.Metadata),
			Healthy:    healthy,
			Eligible:   healthy && m.Live && !m.Draining && !m.NoShards && !m.Excluded && m.State == MemberAlive,
			Leader:     isLeader(m),
			LastUpdate: m.UpdatedAt,
		})
	}
	return out
}

// SetHealth reports this node's health score (clamped to 0..1) and
// metadata (e.g. {"cpu": "45%"}) to the cluster through gossip. Below the
// configured MinHealth the node is no longer eligible: the control group
// revokes its shards and elections, which it drains and hands over (a
// graceful step-down), and gives it none until its score recovers.
// Metadata must be small: the node's whole gossip record is limited to
// 512 bytes.
func (n *Node) SetHealth(score float64, metadata map[string]string) error {
	if n.isClosed() {
		return ErrClosed
	}
	if score != score {
		score = 0
	}
	score = min(max(score, 0), 1)
	if err := n.be.setHealth(score, maps.Clone(metadata)); err != nil {
		return fmt.Errorf("node: set health: %w", err)
	}
	n.mu.Lock()
	n.health, n.healthMeta, n.healthAt = score, maps.Clone(metadata), time.Now()
	n.mu.Unlock()
	return nil
}

// HealthStatus summarises a HealthReport.
type HealthStatus uint8

// The health statuses, from best to worst.
const (
	// Healthy: the control group has quorum, leases renew, nothing is stuck.
	Healthy HealthStatus = iota
	// Degraded: the node works but something needs attention (renewals
	// failing intermittently, low health score, draining, a handover stuck).
	Degraded
	// Unhealthy: the node cannot act (no control-group quorum, lease
	// expired, not registered).
	Unhealthy
)

// String returns the status name.
func (s HealthStatus) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Degraded:
		return "degraded"
	case Unhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("HealthStatus(%d)", uint8(s))
}

// HealthReport is the node's view of its own health, for readiness probes
// and dashboards.
type HealthReport struct {
	Status HealthStatus
	// Reasons explains a status other than Healthy, most severe first.
	Reasons []string
	// ControlLeader is the control group's leader ("" if none known).
	ControlLeader string
	// LastRenewal is when this node's lease was last renewed.
	LastRenewal time.Time
	// LeaseRemaining is how long the node may act without a renewal.
	LeaseRemaining time.Duration
	// Score is this node's own health score (SetHealth).
	Score float64
	// ReplicaHaltedAt is the log index of a committed entry this node's
	// binary cannot read, at which its replica stopped applying (0 while
	// it applies normally; docs/upgrades.md).
	ReplicaHaltedAt uint64
}

// Health reports whether this node can do its job: Unhealthy without a
// control-group quorum or a valid lease, Degraded when lease renewals fail
// intermittently, a revoked shard is wedged past its drain timeout, the
// node's score is below the minimum, or it is draining.
func (n *Node) Health() HealthReport {
	now := time.Now()
	ctl := n.be.control()
	li := n.be.lease()
	n.mu.Lock()
	score := n.health
	n.mu.Unlock()
	r := HealthReport{ControlLeader: ctl.leader, LastRenewal: li.lastAck, Score: score, ReplicaHaltedAt: ctl.haltedAt}
	if li.leaseEnd.After(now) {
		r.LeaseRemaining = li.leaseEnd.Sub(now)
	}
	var bad, warn []string
	if n.isClosed() {
		bad = append(bad, "node closed")
	}
	if ctl.halted != "" {
		bad = append(bad, "replica stopped applying: "+ctl.halted+" (start a binary that reads it)")
	}
	if !ctl.quorum {
		bad = append(bad, "no control-group quorum")
	}
	if why := streamProblem(ctl.stream, n.streamLagBound()); why != "" {
		bad = append(bad, why)
	}
	switch {
	case li.fenced:
		bad = append(bad, "fenced: a newer incarnation of this node id is registered")
	case !li.registered:
		bad = append(bad, "not registered with the control group")
	case r.LeaseRemaining == 0:
		bad = append(bad, fmt.Sprintf("lease expired: last renewal %s ago", now.Sub(li.lastAck).Round(time.Millisecond)))
	case li.failing > 0:
		warn = append(warn, fmt.Sprintf("lease renewals failing (%d in a row)", li.failing))
	}
	if len(li.wedgedShards) > 0 {
		ws := append([]uint32(nil), li.wedgedShards...)
		sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
		warn = append(warn, fmt.Sprintf("ownership wedged: shards %v revoked but not handed over", ws))
	}
	if score < n.cfg.MinHealth {
		warn = append(warn, fmt.Sprintf("health score %.2f below minimum %.2f", score, n.cfg.MinHealth))
	}
	if n.be.draining() {
		warn = append(warn, "draining")
	}
	switch {
	case len(bad) > 0:
		r.Status = Unhealthy
	case len(warn) > 0:
		r.Status = Degraded
	}
	r.Reasons = append(bad, warn...)
	return r
}

// Status is a snapshot of the node for status pages and HTTP APIs.
type Status struct {
	ID          string
	Group       string
	Incarnation uint64
	Profile     Profile
	Partitions  int
	// ControlLeader is the control group's leader; Voters its voters.
	ControlLeader string
	Voters        []string
	// AppliedIndex is the last log index this node's replica applied.
	AppliedIndex uint64
	// Stream is the node's part in the committed-state stream (cluster
	// version 5): a member's lag, a voter's subscribers.
	Stream StreamStatus
	// Owned is the shards this node acts on.
	Owned []Token
	// Health is the node's health report.
	Health HealthReport
}

// Status returns a snapshot of the node.
func (n *Node) Status() Status {
	ctl := n.be.control()
	return Status{
		ID:            n.cfg.NodeID,
		Group:         n.cfg.Group,
		Incarnation:   n.be.incarnation(),
		Profile:       n.cfg.Profile,
		Partitions:    n.cfg.Partitions,
		ControlLeader: ctl.leader,
		Voters:        ctl.voters,
		AppliedIndex:  n.be.appliedIndex(),
		Stream:        ctl.stream,
		Owned:         n.Owned(),
		Health:        n.Health(),
	}
}
