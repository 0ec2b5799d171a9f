package ledger

import (
	"strings"

	"github.com/google/btree"
)

// Operator placement rules (cluster version 3, VersionPlacementRules): a
// shard pinned to a node, a node excluded from placement. The planner
// reads them from the State; docs/ring.md says how they are honoured.

// VersionPlacementRules is the cluster version that introduces PinShard and
// ExcludeNode (encoding version 5, snapshot version 5). A proposer sends
// them only when State.VersionActive(VersionPlacementRules).
const VersionPlacementRules uint32 = 3

// Wire kinds of the placement rule commands (encoding version 5).
const (
	KindPinShard    Kind = 18
	KindExcludeNode Kind = 19
)

// MaxExcludedNodes bounds the exclusion table.
const MaxExcludedNodes = 4096

// PinShard pins Shard (a partition, < the cluster's partition count) to
// Node, a registered node: the planner moves the shard there and keeps it
// there while Node is eligible (alive, healthy, not drained or excluded);
// while it is not, the shard is placed as usual. An empty Node removes the
// pin. Pinning a shard again replaces its pin; a change that changes
// nothing returns Result.Duplicate. Reason is the operator's note, shown
// with the pin.
type PinShard struct {
	Shard  uint32
	Node   string
	Reason string
	Now    int64
}

// ExcludeNode excludes Node from placement (Exclude) or lets it back
// (!Exclude). An excluded node owns no shards or elections: the planner
// moves them off with planned handoffs, as for a drain, and it keeps its
// control-group vote. Node need not be registered yet (exclude a machine
// before it joins). A change that changes nothing returns
// Result.Duplicate.
type ExcludeNode struct {
	Node    string
	Exclude bool
	Reason  string
	Now     int64
}

func (PinShard) kind() Kind    { return KindPinShard }
func (ExcludeNode) kind() Kind { return KindExcludeNode }

func init() {
	register(kindSpec[PinShard]{
		kind: KindPinShard, name: "PinShard", since: 5,
		fields: func(cd codec, c PinShard) PinShard {
			cd.walk(&c.Shard, limited{"node", &c.Node}, limited{"reason", &c.Reason}, &c.Now)
			return c
		},
		apply:      func(f *FSM, _ uint64, c PinShard) Result { return f.pinShard(c) },
		who:        whoOperator,
		authorize:  operatorOnly[PinShard],
		sessionNow: func(c PinShard) int64 { return c.Now },
		// No sessionShard: a session of a pin was always remembered at
		// shard 0 (replicated state).
	})
	register(kindSpec[ExcludeNode]{
		kind: KindExcludeNode, name: "ExcludeNode", since: 5,
		fields: func(cd codec, c ExcludeNode) ExcludeNode {
			cd.walk(limited{"node", &c.Node}, &c.Exclude, limited{"reason", &c.Reason}, &c.Now)
			return c
		},
		apply:      func(f *FSM, _ uint64, c ExcludeNode) Result { return f.excludeNode(c) },
		who:        whoOperator,
		authorize:  operatorOnly[ExcludeNode],
		sessionNow: func(c ExcludeNode) int64 { return c.Now },
	})
}

// PinRecord is one committed pin.
type PinRecord struct {
	Shard  uint32
	Node   string
	Reason string
	At     int64 // proposer clock (unix ns), for display
}

// ExcludeRecord is one committed exclusion.
type ExcludeRecord struct {
	Node   string
	Reason string
	At     int64
}

func newPinTree() *btree.BTreeG[PinRecord] {
	return btree.NewG(btreeDegree, func(a, b PinRecord) bool { return a.Shard < b.Shard })
}

func newExcludeTree() *btree.BTreeG[ExcludeRecord] {
	return btree.NewG(btreeDegree, func(a, b ExcludeRecord) bool { return strings.Compare(a.Node, b.Node) < 0 })
}

// Pins returns every pin, sorted by shard.
func (s *State) Pins() []PinRecord {
	out := make([]PinRecord, 0, s.pins.Len())
	s.pins.Ascend(func(r PinRecord) bool { out = append(out, r); return true })
	return out
}

// Pin returns the pin of shard, if any.
func (s *State) Pin(shard uint32) (PinRecord, bool) { return s.pins.Get(PinRecord{Shard: shard}) }

// Excluded returns every excluded node, sorted by id.
func (s *State) Excluded() []ExcludeRecord {
	out := make([]ExcludeRecord, 0, s.excluded.Len())
	s.excluded.Ascend(func(r ExcludeRecord) bool { out = append(out, r); return true })
	return out
}

// IsExcluded reports whether node is excluded from placement.
func (s *State) IsExcluded(node string) bool {
	_, ok := s.excluded.Get(ExcludeRecord{Node: node})
	return ok
}

func (f *FSM) pinShard(c PinShard) Result {
	parts := f.st.cluster.Partitions
	switch {
	case parts == 0:
		return Result{Err: errf(ErrInvalid, "pin of shard %d: the cluster has not recorded its partition count yet", c.Shard)}
	case c.Shard >= parts:
		return Result{Err: errf(ErrInvalid, "pin of shard %d: the cluster has partitions 0..%d (election shards are placed by group)", c.Shard, parts-1)}
	}
	old, had := f.st.pins.Get(PinRecord{Shard: c.Shard})
	if c.Node == "" {
		if !had {
			return Result{Duplicate: true}
		}
		f.st.pins.Delete(old)
		f.dirty |= dirtyShards
		f.feedAll()
		return Result{}
	}
	if _, ok := f.st.nodes.Get(NodeRecord{ID: c.Node}); !ok {
		return Result{Err: errf(ErrUnknownNode, "pin of shard %d to node %q: no such node is registered", c.Shard, c.Node)}
	}
	if had && old.Node == c.Node {
		return Result{Duplicate: true}
	}
	f.st.pins.ReplaceOrInsert(PinRecord{Shard: c.Shard, Node: c.Node, Reason: c.Reason, At: c.Now})
	f.dirty |= dirtyShards
	f.feedAll()
	return Result{}
}

func (f *FSM) excludeNode(c ExcludeNode) Result {
	if c.Node == "" {
		return Result{Err: errf(ErrInvalid, "exclusion of an empty node id")}
	}
	_, had := f.st.excluded.Get(ExcludeRecord{Node: c.Node})
	switch {
	case had == c.Exclude:
		return Result{Duplicate: true}
	case !c.Exclude:
		f.st.excluded.Delete(ExcludeRecord{Node: c.Node})
	case f.st.excluded.Len() >= MaxExcludedNodes:
		return Result{Err: errf(ErrTooLarge, "exclusion of %q: %d nodes are excluded already (at most %d)", c.Node, f.st.excluded.Len(), MaxExcludedNodes)}
	default:
		f.st.excluded.ReplaceOrInsert(ExcludeRecord{Node: c.Node, Reason: c.Reason, At: c.Now})
	}
	f.dirty |= dirtyShards
	f.feedAll()
	return Result{}
}

func encodePin(w *writer, p PinRecord) {
	w.u(uint64(p.Shard))
	w.str(p.Node)
	w.str(p.Reason)
	w.i(p.At)
}

func decodePin(r *reader) PinRecord {
	return PinRecord{Shard: r.u32(), Node: r.str(), Reason: r.str(), At: r.i()}
}

func encodeExclude(w *writer, e ExcludeRecord) {
	w.str(e.Node)
	w.str(e.Reason)
	w.i(e.At)
}

func decodeExclude(r *reader) ExcludeRecord {
	return ExcludeRecord{Node: r.str(), Reason: r.str(), At: r.i()}
}
