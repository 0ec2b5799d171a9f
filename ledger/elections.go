package ledger

import (
	"cmp"
	"strings"

	"github.com/google/btree"
)

// KindDeclareElection is the wire kind of DeclareElection (encoding
// version 2).
const KindDeclareElection Kind = 15

// MaxElections bounds the elections table (each is a shard the planner
// places).
const MaxElections = 1 << 16

// DeclareElection declares the group-scoped election Name of Group and
// assigns it a dedicated shard: Partitions + k, where k counts the
// elections declared before it (0, 1, ...). Partitions is the cluster's
// partition count; the first declaration records it and every later one
// must carry the same value (ErrInvalid otherwise), so shard ids never
// collide with key shards. Declaring an existing election returns its
// record with Result.Duplicate set: the command is idempotent, and a retry
// after an unknown outcome is safe. Anyone may declare.
type DeclareElection struct {
	Group      string
	Name       string
	Partitions uint32
	Now        int64
}

func (DeclareElection) kind() Kind { return KindDeclareElection }

func init() {
	register(kindSpec[DeclareElection]{
		kind: KindDeclareElection, name: "DeclareElection", since: 2,
		fields: func(cd codec, c DeclareElection) DeclareElection {
			cd.walk(limited{"group", &c.Group}, limited{"name", &c.Name}, &c.Partitions, &c.Now)
			return c
		},
		apply: func(f *FSM, _ uint64, c DeclareElection) Result { return f.declareElection(c) },
		// Members serve their applications' elections.
		who:        whoAnyone,
		authorize:  anyone[DeclareElection],
		sessionNow: func(c DeclareElection) int64 { return c.Now },
	})
}

// ElectionRecord is one declared group-scoped election.
type ElectionRecord struct {
	Group string
	Name  string
	// Shard is the election's dedicated shard (≥ the partition count).
	Shard uint32
	// DeclaredAt is the proposer's clock (unix ns) of the declaration; for
	// display only.
	DeclaredAt int64
}

func lessElection(a, b ElectionRecord) bool {
	return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Name, b.Name)) < 0
}

func newElectionTree() *btree.BTreeG[ElectionRecord] {
	return btree.NewG(btreeDegree, lessElection)
}

// Election returns the declared election name of group.
func (s *State) Election(group, name string) (ElectionRecord, bool) {
	return s.elections.Get(ElectionRecord{Group: group, Name: name})
}

// Elections returns every declared election, sorted by group, then name.
func (s *State) Elections() []ElectionRecord {
	out := make([]ElectionRecord, 0, s.elections.Len())
	s.elections.Ascend(func(r ElectionRecord) bool { out = append(out, r); return true })
	return out
}

// Partitions is the partition count recorded by the first
// DeclareElection (0 before any).
func (s *State) Partitions() uint32 { return s.partitions }

func (f *FSM) declareElection(c DeclareElection) Result {
	switch {
	case c.Name == "":
		return Result{Err: errf(ErrInvalid, "election with an empty name in group %q", c.Group)}
	case c.Partitions == 0:
		return Result{Err: errf(ErrInvalid, "election %q/%q declared with 0 partitions", c.Group, c.Name)}
	case f.st.partitions != 0 && c.Partitions != f.st.partitions:
		return Result{Err: errf(ErrInvalid, "election %q/%q declared with %d partitions, the ledger has %d",
			c.Group, c.Name, c.Partitions, f.st.partitions)}
	}
	if e, ok := f.st.Election(c.Group, c.Name); ok {
		return Result{Election: e, Duplicate: true}
	}
	k := uint64(f.st.elections.Len())
	if k >= MaxElections || uint64(c.Partitions)+k > 1<<32-1 {
		return Result{Err: errf(ErrTooLarge, "election %q/%q: %d elections declared already (at most %d)",
			c.Group, c.Name, k, MaxElections)}
	}
	e := ElectionRecord{Group: c.Group, Name: c.Name, Shard: c.Partitions + uint32(k), DeclaredAt: c.Now}
	f.st.partitions = c.Partitions
	f.st.elections.ReplaceOrInsert(e)
	f.dirty |= dirtyShards
	f.feedAll()
	return Result{Election: e}
}

// electionFields declares an ElectionRecord's wire layout (results and
// snapshots; see codec).
func electionFields(cd codec, e ElectionRecord) ElectionRecord {
	cd.walk(&e.Group, &e.Name, &e.Shard, &e.DeclaredAt)
	return e
}
