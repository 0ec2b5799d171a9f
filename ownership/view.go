package ownership

import (
	"cmp"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ring"
)

// Member is one node of the cluster: gossip's view (a hint) joined, where
// node/ fills them, with the control group's committed view. It is the one
// type of the concept: node.Member is an alias of it. node/ builds it from
// cluster.Member (the gossip record) in two ways: the leader's planner
// input (the placement fields, from gossip alone) and Node.Members (every
// field). The planner reads only the fields up to Zone.
type Member struct {
	ID          string
	Incarnation uint64
	State       member.State
	// Health is the gossiped health score, 0..1.
	Health float64
	// Draining is the gossiped drain request (the ledger's
	// NodeRecord.Draining counts too).
	Draining bool
	// Group is the node's group (node/ gossips it in the "tenure.group"
	// tag): group-scoped election shards are placed only on eligible
	// members of their group.
	Group string
	// NoShards: the node must own nothing — node/ sets it for a
	// control-group voter started with VoterOwnsNoShards, so a voter's
	// death never sits on the owner-failure path. It is a hard signal: the
	// node leaves the placement ring at once and its shards are revoked
	// (drained and handed over).
	NoShards bool
	// Weight is the node's capacity (node/ gossips Config.Weight in the
	// "tenure.weight" tag): its share of the partitions is proportional
	// to it. 0 means 1; values above ring.MaxWeight count as
	// ring.MaxWeight.
	Weight int
	// Load is the node's load summary (node/ gossips it in the
	// "tenure.load" tag: its total and its hottest shards); nil when it
	// reports none. Load balancing runs only while every ring member
	// reports one.
	Load *LoadReport
	// Zone is the node's failure domain (the "tenure.zone" tag): the
	// partitions are apportioned to zones by their total weight, and a
	// group's elections are spread across its zones.
	Zone string

	// The node's view (Node.Members); the planner does not read these.

	// Addr is the gossip address; RaftAddr and HTTPAddr as advertised.
	Addr     string
	RaftAddr string
	HTTPAddr string
	// Metadata is the member's health metadata (Node.SetHealth) and Tags
	// its configured labels.
	Metadata map[string]string
	Tags     map[string]string
	// Excluded: an operator excluded the member from placement
	// (Node.ExcludeNode); it owns nothing while it holds.
	Excluded bool
	// Unproven: the member has not proven its id at its Raft address over
	// TLS, so the control group ignores it (as the leader sees it).
	Unproven bool
	// Live reports whether the member's committed liveness is valid (its
	// heartbeats are being committed).
	Live bool
	// Voter reports whether the member votes in the control group; Leader
	// whether it leads it.
	Voter  bool
	Leader bool
	// UpdatedAt is when the member last reported in (see
	// node.Candidate.LastUpdate).
	UpdatedAt time.Time
	Version   string
}

// UpAtRegistered is the one rule for "gossip shows the node up at its
// registered incarnation": gossip reports it up (Alive or Suspect) with the
// incarnation its committed record holds. Finalizing counts such a node as
// live even while its lease has lapsed (Planner.clusterConfig), and
// node/ reports it as Member.Live (Node.Members, upgrade status).
func UpAtRegistered(rec ledger.NodeRecord, state member.State, incarnation uint64) bool {
	return state.Up() && incarnation == rec.Incarnation
}

// LoadReport is a node's gossiped load summary (node.LoadSummary is an
// alias of it).
type LoadReport struct {
	Total float64
	Hot   []ring.ShardLoad // its hottest shards, hottest first
}

// Input is everything the planner looks at in one round: the leader's
// gossip view and its committed ledger table. Order does not matter; the
// planner sorts.
type Input struct {
	Members []Member
	Shards  []ledger.ShardRecord
	Nodes   []ledger.NodeRecord
	// Elections are the declared group-scoped elections; their shards
	// (≥ Partitions) are placed among their group's eligible members.
	Elections []ledger.ElectionRecord
	// Cluster is the committed cluster configuration.
	Cluster ledger.ClusterInfo
	// Pins and Excluded are the operator's committed placement rules
	// (ledger.State.Pins, Excluded): a pinned partition goes to its node
	// while that node is in the placement ring; an excluded node leaves
	// the ring at once (a hard signal, like a drain).
	Pins     []ledger.PinRecord
	Excluded []ledger.ExcludeRecord
	// Applied is the log index the table was read at (0: unknown; the
	// planner then forgets no node, see Config.ForgetAfter).
	Applied uint64
	// Fenced are the shards under fenced takeover
	// (ledger.State.FencedRanges; fenced.go).
	Fenced []ledger.ShardRange
	// Settings are the settings the leader's replica applies with
	// (ledger.State.Settings): the planner commits them (LogSettings) once
	// the cluster runs ledger.VersionLogSettings and none are logged.
	Settings ledger.LedgerSettings
}

// table is a sorted, indexed copy of the committed records.
type table struct {
	pins     map[uint32]string // operator pins: shard -> node
	excluded map[string]bool   // operator exclusions
	fenced   fencedView        // fenced-takeover policy (fenced.go)
	shards   map[uint32]ledger.ShardRecord
	nodes    map[string]ledger.NodeRecord
	ids      []string // node ids, sorted
	groups   groupView
	// expiring are the nodes this round proposes ExpireNode for
	// (expireView): the rest of the round plans as if those had applied.
	expiring map[string]bool
	// words: the cluster runs ledger.VersionHandoffWords (a target may act
	// on its old owner's word).
	words bool
}

func newTable(shards []ledger.ShardRecord, nodes []ledger.NodeRecord) table {
	t := table{
		shards: make(map[uint32]ledger.ShardRecord, len(shards)),
		nodes:  make(map[string]ledger.NodeRecord, len(nodes)),
	}
	for _, s := range shards {
		t.shards[s.Shard] = s
	}
	for _, n := range nodes {
		t.nodes[n.ID] = n
	}
	t.ids = make([]string, 0, len(t.nodes))
	for id := range t.nodes {
		t.ids = append(t.ids, id)
	}
	slices.Sort(t.ids)
	return t
}

// expireView applies a round's ExpireNode commands to the view, as the
// ledger will when they commit ahead of the round's other proposals: each
// expired node's liveness epoch moves on, so the shards it owns are
// invalid and are granted in the same round, and it is marked expiring, so
// the round places nothing on it. If an ExpireNode loses its compare-and-set
// (a heartbeat landed first), the grants of that node's shards are refused
// by the ledger (the ownership is still valid) and nothing is lost.
func (t *table) expireView(cmds []ledger.Command) {
	for _, c := range cmds {
		e, ok := c.(ledger.ExpireNode)
		if !ok {
			continue
		}
		n, known := t.nodes[e.Node]
		if !known {
			continue
		}
		if t.expiring == nil {
			t.expiring = make(map[string]bool)
		}
		n.Liveness = e.Liveness + 1
		t.nodes[e.Node] = n
		t.expiring[e.Node] = true
	}
}

func (t table) shard(s uint32) ledger.ShardRecord {
	if r, ok := t.shards[s]; ok {
		return r
	}
	return ledger.ShardRecord{Shard: s}
}

// valid reports whether a shard's committed ownership is valid in the
// table (docs/protocol.md): the ledger's rule, ledger.OwnershipValidWith.
func (t table) valid(rec ledger.ShardRecord) bool {
	n, ok := t.nodes[rec.Owner]
	return ledger.OwnershipValidWith(rec, n, ok)
}

// sortedMembers returns members sorted by id, keeping the highest
// incarnation when an id appears twice.
func sortedMembers(in []Member) []Member {
	ms := slices.Clone(in)
	slices.SortFunc(ms, func(a, b Member) int {
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Incarnation, a.Incarnation); c != 0 {
			return c
		}
		// Same id and incarnation twice: keep the most pessimistic view so
		// that the result does not depend on input order.
		if c := cmp.Compare(b.State, a.State); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Health, b.Health); c != 0 {
			return c
		}
		if a.Draining != b.Draining {
			if a.Draining {
				return -1
			}
			return 1
		}
		return 0
	})
	return slices.CompactFunc(ms, func(a, b Member) bool { return a.ID == b.ID })
}
