package ring

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// memberKeySuffix is appended to every member name to form the key that
// goes on the hash circle. consistent names virtual node i of member m by
// the string m+strconv.Itoa(i), so with plain names "a1" (vnode 0) and "a"
// (vnode 10) would both be "a10" (consistent issue #17). A key ending in
// "/m" followed only by digits splits uniquely at its last "/m", so no two
// distinct members can ever produce the same vnode string.
const memberKeySuffix = "/m"

// Member is a ring member with a weight.
//
// Weight is reserved for health-based placement: 0 (the zero value) and 1
// both mean a normal member. Today NewWeighted only validates weights
// (finite, ≥ 0) and places every member as if its weight were 1; a later
// version may give lower-weight members fewer shards. Members that must get
// no shards at all should be left out of the member set.
type Member struct {
	Name   string
	Weight float64
}

// Ring is an immutable snapshot: the proposed owner of every shard for one
// member set under one Config. It is safe for concurrent use. A nil *Ring
// behaves as a ring without members (its Config is the zero Config).
type Ring struct {
	cfg     Config
	members []string // sorted
	owners  []string // shard → member name; nil when there are no members
	loads   []int    // parallel to members
}

// Move is one shard whose proposed owner differs between two rings. From or
// To is "" when the shard has no owner on that side.
type Move struct {
	Shard    uint32
	From, To string
}

// New builds the bounded-load ring for members under cfg. The planner does
// not use it (it places with Assign, which keeps shards where they are);
// New stays for `tenure bench ring` and as a comparison. The result depends
// only on the set of names, never on their order. A nil or empty member list gives
// a valid ring on which every Owner is "".
//
// Placement: members are placed on a consistent-hashing circle (xxhash,
// cfg.ReplicationFactor virtual nodes each) and shards are assigned with
// bounded loads by buraksezer/consistent, so no member gets more than
// cfg.MaxLoadFor(N) ≤ ceil(P/N·Load) shards. A second, deterministic pass
// (unless cfg.MinLoad is 0) then raises every member to at least
// floor(P/N·MinLoad) shards, moving shards only from members that stay at
// or above that floor; the shard to move is the one with the highest hash
// score for the receiving member, so the choice is stable across membership
// changes. The pass never raises the maximum. docs/ring.md has the details
// and measurements.
//
// Errors: cfg invalid (ErrInvalidConfig), an empty name (ErrInvalidMember),
// a repeated name (ErrDuplicateMember), more members than partitions or
// too many virtual nodes (ErrTooManyMembers), a virtual node hash collision
// (ErrHashCollision), or a recovered panic of the underlying library
// (ErrInternal).
func New(cfg Config, members []string) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	names, err := sortedNames(members)
	if err != nil {
		return nil, err
	}
	return build(cfg, names)
}

// NewWeighted is New for members with weights. It validates every weight
// (finite and ≥ 0, else ErrInvalidMember naming the member) but currently
// places all members as equals; see Member.
func NewWeighted(cfg Config, members []Member) (*Ring, error) {
	names := make([]string, len(members))
	for i, m := range members {
		if math.IsNaN(m.Weight) || math.IsInf(m.Weight, 0) || m.Weight < 0 {
			return nil, fmt.Errorf("%w: member %q has Weight = %v, want a finite number ≥ 0", ErrInvalidMember, m.Name, m.Weight)
		}
		names[i] = m.Name
	}
	return New(cfg, names)
}

// MaxLoadFor returns the most shards any member may own in a ring of n
// members: the library's bound ceil(floor(P/n) · Load), raised to ceil(P/n)
// when that bound leaves too little room (Load near 1 with n not dividing
// P). It is never above ceil(P/n · Load). It returns 0 for n < 1 or n > P.
func (c Config) MaxLoadFor(n int) int {
	p := c.Partitions
	if n < 1 || n > p {
		return 0
	}
	lib := math.Ceil(float64(p/n) * c.Load) // exactly as consistent computes it
	return int(max(min(lib, float64(p)), float64((p+n-1)/n)))
}

// libraryLoad returns the Load to hand consistent v0.10.0 for n members:
// cfg.Load itself, unless the library's cap would leave no room for every
// shard (it then panics "not enough room"); in that case a load whose cap,
// ceil(floor(P/n) · load), is exactly ceil(P/n). Needs 1 ≤ n ≤ P.
func libraryLoad(cfg Config, n int) float64 {
	q := cfg.Partitions / n
	if math.Ceil(float64(q)*cfg.Load) >= float64(cfg.MaxLoadFor(n)) {
		return cfg.Load
	}
	return (float64(cfg.MaxLoadFor(n)) - 0.5) / float64(q)
}

// checkFit rejects the member counts consistent v0.10.0 cannot place.
func checkFit(cfg Config, n int) error {
	p := cfg.Partitions
	if n > p {
		return fmt.Errorf("%w: %d members for Partitions = %d; want at most one member per partition", ErrTooManyMembers, n, p)
	}
	if n*cfg.ReplicationFactor > MaxVirtualNodes {
		return fmt.Errorf("%w: %d members × ReplicationFactor %d > %d virtual nodes", ErrTooManyMembers, n, cfg.ReplicationFactor, MaxVirtualNodes)
	}
	// The library's per-member cap, computed exactly as it does. With
	// libraryLoad this cannot fail; it stays as a guard.
	load := libraryLoad(cfg, n)
	capacity := math.Ceil(float64(p/n) * load)
	if float64(n)*capacity < float64(p) {
		return fmt.Errorf("%w: %d members × ceil(floor(%d/%d) × %v) = %v < Partitions %d",
			ErrNoRoom, n, p, n, load, float64(n)*capacity, p)
	}
	return nil
}

// checkCollisions makes sure no two virtual nodes share a circle position:
// the library would silently let one member shadow the other.
func checkCollisions(cfg Config, keys []string) error {
	seen := make(map[uint64]int, len(keys)*cfg.ReplicationFactor)
	var buf []byte
	for mi, k := range keys {
		for i := 0; i < cfg.ReplicationFactor; i++ {
			buf = strconv.AppendInt(append(buf[:0], k...), int64(i), 10)
			h := xxhash.Sum64(buf)
			if other, dup := seen[h]; dup {
				return fmt.Errorf("%w: members %q and %q", ErrHashCollision, trimKey(keys[other]), trimKey(k))
			}
			seen[h] = mi
		}
	}
	return nil
}

func trimKey(k string) string { return k[:len(k)-len(memberKeySuffix)] }

// newConsistent is consistent.New; tests replace it to exercise the panic
// recovery.
var newConsistent = consistent.New

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

type vnodeMember string

func (m vnodeMember) String() string { return string(m) }

// build places sorted, unique, non-empty names.
func build(cfg Config, names []string) (r *Ring, err error) {
	r = &Ring{cfg: cfg, members: names, loads: make([]int, len(names))}
	if len(names) == 0 {
		return r, nil
	}
	if err := checkFit(cfg, len(names)); err != nil {
		return nil, err
	}
	keys := make([]string, len(names))
	index := make(map[string]int, len(names))
	cms := make([]consistent.Member, len(names))
	for i, n := range names {
		keys[i] = n + memberKeySuffix
		index[keys[i]] = i
		cms[i] = vnodeMember(keys[i])
	}
	if err := checkCollisions(cfg, keys); err != nil {
		return nil, err
	}

	defer func() {
		if v := recover(); v != nil {
			r, err = nil, fmt.Errorf("%w: consistent panicked with %d members, %+v: %v", ErrInternal, len(names), cfg, v)
		}
	}()
	c := newConsistent(cms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.Partitions,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              libraryLoad(cfg, len(names)),
	})

	owner := make([]int32, cfg.Partitions)
	for p := range owner {
		m := c.GetPartitionOwner(p)
		if m == nil {
			return nil, fmt.Errorf("%w: partition %d has no owner", ErrInternal, p)
		}
		i, ok := index[m.String()]
		if !ok {
			return nil, fmt.Errorf("%w: partition %d owned by unknown member %q", ErrInternal, p, m.String())
		}
		owner[p] = int32(i)
		r.loads[i]++
	}
	if cfg.MinLoad > 0 {
		raiseMin(cfg, keys, owner, r.loads)
	}
	r.owners = make([]string, cfg.Partitions)
	for p, i := range owner {
		r.owners[p] = names[i]
	}
	return r, nil
}

// minTarget is the load the second pass raises every member to.
func minTarget(cfg Config, n int) int {
	return int(math.Floor(float64(cfg.Partitions) / float64(n) * cfg.MinLoad))
}

// raiseMin moves shards to members below minTarget. Each step takes the
// least loaded member u (lowest index on ties) and gives it the shard, among
// those whose owner has more than the target, with the highest score(shard,
// u); ties go to the lower shard. Donors stay ≥ target and u stays below the
// old maximum, so the max-load bound holds. Deterministic: it depends only
// on the sorted member keys and the first pass.
func raiseMin(cfg Config, keys []string, owner []int32, loads []int) {
	target := minTarget(cfg, len(keys))
	seeds := make([]uint64, len(keys))
	for i, k := range keys {
		seeds[i] = xxhash.Sum64String(k)
	}
	for {
		u := 0
		for i, l := range loads {
			if l < loads[u] {
				u = i
			}
		}
		if loads[u] >= target {
			return
		}
		best, bestScore := -1, uint64(0)
		for p, o := range owner {
			if loads[o] <= target {
				continue
			}
			if s := score(seeds[u], uint32(p)); best < 0 || s > bestScore {
				best, bestScore = p, s
			}
		}
		if best < 0 {
			return // cannot happen: loads sum to P ≥ N·target
		}
		loads[owner[best]]--
		owner[best] = int32(u)
		loads[u]++
	}
}

// score is a rendezvous-style hash of (member, shard): splitmix64's
// finalizer over the member's seed mixed with the shard.
func score(seed uint64, shard uint32) uint64 {
	z := seed ^ (uint64(shard)+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Owner returns the proposed owner of shard, or "" if the ring has no
// members or shard ≥ Partitions. It does not allocate.
func (r *Ring) Owner(shard uint32) string {
	if r == nil || int64(shard) >= int64(len(r.owners)) {
		return ""
	}
	return r.owners[shard]
}

// OwnerOfKey returns the proposed owner of key's shard.
func (r *Ring) OwnerOfKey(key []byte) string {
	if r == nil {
		return ""
	}
	return r.Owner(ShardFor(r.cfg.Partitions, key))
}

// Members returns the member names, sorted. The slice is a copy.
func (r *Ring) Members() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.members)
}

// Len returns the number of members.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.members)
}

// Config returns the Config the ring was built with.
func (r *Ring) Config() Config {
	if r == nil {
		return Config{}
	}
	return r.cfg
}

// Loads returns the number of shards each member owns; every member is
// present, possibly with 0.
func (r *Ring) Loads() map[string]int {
	if r == nil {
		return map[string]int{}
	}
	m := make(map[string]int, len(r.members))
	for i, n := range r.members {
		m[n] = r.loads[i]
	}
	return m
}

// MaxLoad returns the largest number of shards any member owns (0 with no
// members). It is at most Config().MaxLoadFor(N) ≤ ceil(P/N·Load).
func (r *Ring) MaxLoad() int {
	if r == nil || len(r.loads) == 0 {
		return 0
	}
	return slices.Max(r.loads)
}

// MinLoad returns the smallest number of shards any member owns (0 with no
// members). It is at least floor(P/N · MinLoad).
func (r *Ring) MinLoad() int {
	if r == nil || len(r.loads) == 0 {
		return 0
	}
	return slices.Min(r.loads)
}

// Diff lists the shards whose owner differs from from to to, sorted by
// shard. A nil ring counts as a ring without members. If the rings have
// different partition counts, shards beyond one ring's count have owner ""
// on that side (comparing such rings is rarely meaningful: keys remap).
func Diff(from, to *Ring) []Move {
	var a, b []string
	if from != nil {
		a = from.owners
	}
	if to != nil {
		b = to.owners
	}
	n := 0
	if from != nil {
		n = from.cfg.Partitions
	}
	if to != nil && to.cfg.Partitions > n {
		n = to.cfg.Partitions
	}
	var moves []Move
	ownerChanges(a, b, n, func(s int, x, y string) {
		moves = append(moves, Move{Shard: uint32(s), From: x, To: y})
	})
	return moves
}

// ownerChanges calls f, in shard order, for every shard s < n whose owner
// differs between the assignments a and b; a shard beyond a slice's end
// has owner "" there.
func ownerChanges(a, b []string, n int, f func(shard int, from, to string)) {
	for s := range n {
		var x, y string
		if s < len(a) {
			x = a[s]
		}
		if s < len(b) {
			y = b[s]
		}
		if x != y {
			f(s, x, y)
		}
	}
}

// sortedNames returns a sorted copy of members, or ErrInvalidMember for an
// empty name or ErrDuplicateMember for a repeated one: the member-name rule
// of New and Assign.
func sortedNames(members []string) ([]string, error) {
	names := slices.Clone(members)
	slices.Sort(names)
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("%w: empty member name", ErrInvalidMember)
		}
		if i > 0 && names[i-1] == n {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateMember, n)
		}
	}
	return names, nil
}
