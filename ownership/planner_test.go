package ownership

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/member"
	"github.com/tenurehq/tenure/ring"
)

// plannerEnv is the world of one planner script: a gossip view, a committed
// table and a planner. Times in scripts are offsets from t0.
type plannerEnv struct {
	cfg     Config
	p       *Planner
	members map[string]Member
	ledger  *testLedger
	// elections declared by the script, in declaration order.
	elections []ledger.ElectionRecord
	// operator rules (pin shard=… node=…, exclude id=… [off])
	pins     map[uint32]string
	excluded map[string]bool
}

var t0 = time.Unix(1_000_000, 0)

func newPlannerEnv(t testing.TB, cfg Config) *plannerEnv {
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &plannerEnv{cfg: cfg, p: p, members: map[string]Member{}, ledger: newTestLedger()}
}

func (e *plannerEnv) input() Input {
	in := Input{Shards: e.ledger.shards(), Nodes: e.ledger.nodes(), Elections: e.elections}
	for _, s := range sortedShardKeys(e.pins) {
		in.Pins = append(in.Pins, ledger.PinRecord{Shard: s, Node: e.pins[s]})
	}
	for _, id := range sortedKeys(e.excluded) {
		in.Excluded = append(in.Excluded, ledger.ExcludeRecord{Node: id})
	}
	for _, id := range sortedKeys(e.members) {
		in.Members = append(in.Members, e.members[id])
	}
	for _, s := range sortedShardKeys(e.ledger.fenced) {
		in.Fenced = append(in.Fenced, ledger.ShardRange{First: s, Last: s})
	}
	return in
}

func sortedShardKeys[V any](m map[uint32]V) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func argStr(td *datadriven.TestData, key, def string) string {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "true"
			}
			return a.Vals[0]
		}
	}
	return def
}

func argDur(t testing.TB, td *datadriven.TestData, key string, def time.Duration) time.Duration {
	s := argStr(td, key, "")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", td.Pos, err)
	}
	return d
}

func argInt(t testing.TB, td *datadriven.TestData, key string, def int) int {
	s := argStr(td, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", td.Pos, err)
	}
	return v
}

func argFloat(t testing.TB, td *datadriven.TestData, key string, def float64) float64 {
	s := argStr(td, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s: %v", td.Pos, err)
	}
	return v
}

func parseGossip(t testing.TB, s string) member.State {
	switch s {
	case "alive":
		return member.Alive
	case "suspect":
		return member.Suspect
	case "dead":
		return member.Dead
	case "left":
		return member.Left
	}
	t.Fatalf("unknown gossip state %q", s)
	return 0
}

// TestPlannerScripts runs the planner scenario scripts in testdata/planner.
//
//	config [partitions=N] [k=N] [stable=D] [minhealth=F]   reset the world
//	join id=N [inc=I] [health=F] [group=G]  gossip alive + first heartbeat
//	declare group=G name=E           a group election (shard Partitions+k)
//	fence shard=S [off]              the shard's fenced-takeover policy
//	member id=N [inc=I] [state=S] [health=F] [draining] [noshards] [gone]
//	heartbeat id=N [inc=I] [rejoin]  a committed heartbeat
//	drain id=N [off]                 committed SetDraining
//	release shard=S | transfer shard=S   the owner hands a Revoking shard over
//	resign shard=S                   the owner releases with Avoid (resigns)
//	establish t=D                    this node became leader at t0+D
//	plan t=D [apply]                 run one round, print (and apply) proposals
//	run from=D to=D [every=D] [hb=n1,n2]  rounds with heartbeats, applying; prints changes
//	table                            print the committed shard table
func TestPlannerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/planner", func(t *testing.T, path string) {
		e := newPlannerEnv(t, TestConfig())
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return e.run(t, td)
		})
	})
}

func (e *plannerEnv) run(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "config":
		cfg := TestConfig()
		cfg.Ring.Partitions = argInt(t, td, "partitions", cfg.Ring.Partitions)
		cfg.MaxMovesInFlight = argInt(t, td, "k", cfg.MaxMovesInFlight)
		cfg.StableFor = argDur(t, td, "stable", cfg.StableFor)
		cfg.MinHealth = argFloat(t, td, "minhealth", cfg.MinHealth)
		*e = *newPlannerEnv(t, cfg)
		return ""
	case "join":
		id := argStr(td, "id", "")
		inc := uint64(argInt(t, td, "inc", 1))
		e.members[id] = Member{ID: id, Incarnation: inc, State: member.Alive, Health: argFloat(t, td, "health", 1),
			Group: argStr(td, "group", ""), Zone: argStr(td, "zone", ""), Weight: argInt(t, td, "weight", 0)}
		return e.ledger.heartbeat(id, inc, false)
	case "member":
		id := argStr(td, "id", "")
		if td.HasArg("gone") {
			delete(e.members, id)
			return ""
		}
		m := e.members[id]
		m.ID = id
		m.Incarnation = uint64(argInt(t, td, "inc", int(max(m.Incarnation, 1))))
		m.State = parseGossip(t, argStr(td, "state", m.State.String()))
		m.Health = argFloat(t, td, "health", 1)
		m.Draining = td.HasArg("draining")
		m.NoShards = td.HasArg("noshards")
		e.members[id] = m
		return ""
	case "declare":
		s := uint32(e.cfg.Ring.Partitions + len(e.elections))
		e.elections = append(e.elections, ledger.ElectionRecord{Group: argStr(td, "group", ""), Name: argStr(td, "name", ""), Shard: s})
		return fmt.Sprintf("s%d\n", s)
	case "heartbeat":
		id := argStr(td, "id", "")
		inc := uint64(argInt(t, td, "inc", int(e.ledger.node[id].Incarnation)))
		return e.ledger.heartbeat(id, inc, td.HasArg("rejoin"))
	case "drain":
		id := argStr(td, "id", "")
		n := e.ledger.node[id]
		n.Draining = !td.HasArg("off")
		e.ledger.node[id] = n
		return ""
	case "load":
		// load id=n1 total=30 hot=0:20,3:5 (no total: reports none)
		id := argStr(td, "id", "")
		m := e.members[id]
		m.Load = nil
		if td.HasArg("total") {
			lr := &LoadReport{Total: argFloat(t, td, "total", 0)}
			if h := argStr(td, "hot", ""); h != "" {
				for _, kv := range strings.Split(h, ",") {
					s, v, _ := strings.Cut(kv, ":")
					shard, err1 := strconv.Atoi(s)
					val, err2 := strconv.ParseFloat(v, 64)
					if err1 != nil || err2 != nil {
						t.Fatalf("%s: hot %q", td.Pos, kv)
					}
					lr.Hot = append(lr.Hot, ring.ShardLoad{Shard: uint32(shard), Load: val})
				}
			}
			m.Load = lr
		}
		e.members[id] = m
		return ""
	case "pin":
		if e.pins == nil {
			e.pins = map[uint32]string{}
		}
		s := uint32(argInt(t, td, "shard", 0))
		if n := argStr(td, "node", ""); n != "" {
			e.pins[s] = n
		} else {
			delete(e.pins, s)
		}
		return ""
	case "fence":
		// fence shard=S [off]: the shard's fenced-takeover policy
		if e.ledger.fenced == nil {
			e.ledger.fenced = map[uint32]bool{}
		}
		s := uint32(argInt(t, td, "shard", 0))
		if td.HasArg("off") {
			delete(e.ledger.fenced, s)
		} else {
			e.ledger.fenced[s] = true
		}
		return ""
	case "exclude":
		if e.excluded == nil {
			e.excluded = map[string]bool{}
		}
		id := argStr(td, "id", "")
		if td.HasArg("off") {
			delete(e.excluded, id)
		} else {
			e.excluded[id] = true
		}
		return ""
	case "resign":
		return e.ledger.resign(uint32(argInt(t, td, "shard", 0)))
	case "release", "transfer":
		s := uint32(argInt(t, td, "shard", 0))
		return e.ledger.handoff(s, td.Cmd == "transfer")
	case "establish":
		// establish t=… [bound=…]: bound is relative to t0 like t.
		var bound time.Time
		if td.HasArg("bound") {
			bound = t0.Add(argDur(t, td, "bound", 0))
		}
		e.p.Establish(t0.Add(argDur(t, td, "t", 0)), e.input(), bound)
		return ""
	case "renew":
		// renew id=n1 t=… [inc=…] [liveness=…]: the leader receives a
		// renewal of the node at its recorded (or the given) epoch.
		id := argStr(td, "id", "")
		rec := e.ledger.node[id]
		inc := uint64(argInt(t, td, "inc", int(rec.Incarnation)))
		liv := uint64(argInt(t, td, "liveness", int(rec.Liveness)))
		if err := e.p.Renew(t0.Add(argDur(t, td, "t", 0)), rec, inc, liv); err != nil {
			return "error: " + err.Error() + "\n"
		}
		return "ok\n"
	case "plan":
		return e.plan(t, t0.Add(argDur(t, td, "t", 0)), td.HasArg("apply"), "")
	case "run":
		from, to := argDur(t, td, "from", 0), argDur(t, td, "to", 0)
		every := argDur(t, td, "every", e.cfg.RenewEvery)
		var hb, renew []string
		if s := argStr(td, "hb", ""); s != "" {
			hb = strings.Split(s, ",")
		}
		if s := argStr(td, "renew", ""); s != "" {
			renew = strings.Split(s, ",")
		}
		var b strings.Builder
		for d := from; d <= to; d += every {
			for _, id := range hb {
				e.ledger.heartbeat(id, e.ledger.node[id].Incarnation, false)
			}
			for _, id := range renew {
				rec := e.ledger.node[id]
				if err := e.p.Renew(t0.Add(d), rec, rec.Incarnation, rec.Liveness); err != nil {
					fmt.Fprintf(&b, "%v: renew %s: %v\n", d, id, err)
				}
			}
			b.WriteString(e.plan(t, t0.Add(d), true, d.String()+": "))
		}
		return b.String()
	case "table":
		return e.ledger.table()
	case "ring":
		return strings.Join(e.p.RingMembers(), " ") + "\n"
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}

func (e *plannerEnv) plan(t *testing.T, now time.Time, apply bool, prefix string) string {
	cmds, err := e.p.Plan(now, e.input())
	var b strings.Builder
	if err != nil {
		fmt.Fprintf(&b, "%serror: %v\n", prefix, err)
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "%s%s", prefix, FormatCommand(c))
		if apply {
			if err := e.ledger.apply(c); err != nil {
				fmt.Fprintf(&b, " REJECTED: %v", err)
			}
		}
		b.WriteString("\n")
	}
	checkOneOwnerPerShard(t, cmds)
	return b.String()
}

// checkOneOwnerPerShard fails if a round proposes two changes for a shard.
func checkOneOwnerPerShard(t testing.TB, cmds []ledger.Command) {
	t.Helper()
	seen := map[uint32]bool{}
	for _, c := range cmds {
		var s uint32
		switch c := c.(type) {
		case ledger.Grant:
			s = c.Shard
		case ledger.Revoke:
			s = c.Shard
		default:
			continue
		}
		if seen[s] {
			t.Fatalf("two proposals for shard %d in one round: %v", s, cmds)
		}
		seen[s] = true
	}
}

// A drained shard can be transferred to a target the leader has already
// expired: the old owner's retry carries the target's new liveness epoch,
// which the ledger accepts, though the target holds no lease at it. The
// leader must not revoke it from there (the target never drains; the shard
// would wait a full (Lease+Drain)·(1+δ) takeover) but re-expire the target
// at once: it cannot act at a liveness epoch it never heartbeated at.
func TestPlannerReExpiresTransferTargetWithoutLease(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 2
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	members := []Member{{ID: "n1", Incarnation: 1, State: member.Alive, Health: 1}, {ID: "n2", Incarnation: 1, State: member.Alive, Health: 1}}
	n1 := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 5}
	n2 := ledger.NodeRecord{ID: "n2", Incarnation: 1, Liveness: 1, Seq: 5}
	shards := []ledger.ShardRecord{
		{Shard: 0, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardRevoking, Target: "n2"},
		{Shard: 1, Epoch: 1, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned},
	}
	in := func(now time.Duration) Input {
		n1.Seq++ // n1 keeps heartbeating
		return Input{Members: members, Nodes: []ledger.NodeRecord{n1, n2}, Shards: slices.Clone(shards)}
	}
	p.Establish(t0, in(0), time.Time{})
	// n2 is expired (its liveness moves without a heartbeat)...
	n2.Liveness = 2
	if _, err := p.Plan(t0.Add(100*time.Millisecond), in(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// ...then n1's handoff lands as a Transfer to n2 at its new epoch.
	shards[0] = ledger.ShardRecord{Shard: 0, Epoch: 2, Owner: "n2", OwnerIncarnation: 1, OwnerLiveness: 2, State: ledger.ShardOwned}
	cmds, err := p.Plan(t0.Add(200*time.Millisecond), in(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// The same round grants the shard on (the expiry first): the ledger
	// accepts the grant once the re-expiry applied, and refuses it if a
	// heartbeat of n2 lands first.
	now := t0.Add(200 * time.Millisecond).UnixNano()
	want := []ledger.Command{
		ledger.ExpireNode{Node: "n2", Incarnation: 1, Liveness: 2, Seq: 5, Now: now},
		ledger.Grant{Shard: 0, ExpectedEpoch: 2, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: 1, Now: now, Reason: "owner n2 expired"},
	}
	if !slices.Equal(cmds, want) {
		t.Fatalf("proposals %v, want %v", cmds, want)
	}
}

// TestPlannerForgetsGoneNodes: a node the leader expired, that gossip no
// longer shows and that owns nothing is forgotten (ForgetNode) once it has
// been gone ForgetAfter, and only when the cluster runs
// ledger.VersionForgetNodes; a node still named by a shard is kept.
func TestPlannerForgetsGoneNodes(t *testing.T) {
	cfg := TestConfig()
	cfg.ForgetAfter = time.Minute
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	a := ledger.NodeRecord{ID: "a", Incarnation: 1, Liveness: 1, Seq: 1}
	m := ledger.NodeRecord{ID: "m", Incarnation: 2, Liveness: 1, Seq: 1}
	k := ledger.NodeRecord{ID: "k", Incarnation: 3, Liveness: 1, Seq: 1}
	input := func(version uint32) Input {
		return Input{
			Members: []Member{{ID: "a", Incarnation: 1, State: member.Alive, Health: 1}},
			Nodes:   []ledger.NodeRecord{a, m, k},
			// k is still named by a revocation's target.
			Shards:  []ledger.ShardRecord{{Shard: 0, Epoch: 3, Owner: "a", OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardRevoking, Target: "k"}},
			Cluster: ledger.ClusterInfo{Name: "c", Partitions: uint32(cfg.Ring.Partitions), Version: version},
			Applied: 100,
		}
	}
	p.Establish(t0, input(ledger.VersionForgetNodes), time.Time{})
	// m and k expire (liveness moves without a heartbeat); a heartbeats.
	m.Liveness, k.Liveness = 2, 2
	forgotten := func(now time.Time, version uint32) []string {
		a.Seq++
		cmds, err := p.Plan(now, input(version))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range cmds {
			if f, ok := c.(ledger.ForgetNode); ok {
				if f.Incarnation != 2 || f.Liveness != 2 || f.Seq != 1 {
					t.Fatalf("forget %+v, want m's record", f)
				}
				ids = append(ids, f.Node)
			}
		}
		return ids
	}
	if ids := forgotten(t0.Add(cfg.RenewEvery), ledger.VersionForgetNodes); len(ids) != 0 {
		t.Fatalf("forgot %v at once", ids)
	}
	if ids := forgotten(t0.Add(cfg.ForgetAfter+time.Second), ledger.VersionForgetNodes-1); len(ids) != 0 {
		t.Fatalf("forgot %v at cluster version %d", ids, ledger.VersionForgetNodes-1)
	}
	if ids := forgotten(t0.Add(cfg.ForgetAfter+2*time.Second), ledger.VersionForgetNodes); len(ids) != 1 || ids[0] != "m" {
		t.Fatalf("forgot %v, want [m] (k is a revocation's target)", ids)
	}
}

// A round that expires a node also grants its shards (expiry first), never
// to the expiring node. If the expiry loses its compare-and-set (the
// node's heartbeat lands first), the ledger refuses those grants and the
// next round finds the node still in the ring: nothing moves.
func TestPlannerExpiresAndGrantsInOneRound(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 4
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	members := []Member{{ID: "n1", Incarnation: 1, State: member.Alive, Health: 1}, {ID: "n2", Incarnation: 1, State: member.Alive, Health: 1}}
	n1 := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 5}
	n2 := ledger.NodeRecord{ID: "n2", Incarnation: 1, Liveness: 1, Seq: 5}
	var shards []ledger.ShardRecord
	for s := range uint32(4) {
		owner := []string{"n1", "n2"}[s%2]
		shards = append(shards, ledger.ShardRecord{Shard: s, Epoch: 1, Owner: owner, OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned})
	}
	in := func() Input {
		n1.Seq++ // n1 keeps heartbeating
		return Input{Members: members, Nodes: []ledger.NodeRecord{n1, n2}, Shards: slices.Clone(shards)}
	}
	p.Establish(t0, in(), time.Time{})
	for at := 100 * time.Millisecond; at < cfg.ExpireAfter(); at += 100 * time.Millisecond {
		if cmds, _ := p.Plan(t0.Add(at), in()); len(cmds) > 0 {
			t.Fatalf("at %v (before the expiry): %v", at, cmds)
		}
	}
	now := t0.Add(cfg.ExpireAfter())
	cmds, err := p.Plan(now, in())
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 3 {
		t.Fatalf("proposals %v, want the expiry of n2 and two grants", cmds)
	}
	if e, ok := cmds[0].(ledger.ExpireNode); !ok || e.Node != "n2" || e.Liveness != 1 {
		t.Fatalf("first proposal %v, want expire n2 at liveness 1", FormatCommand(cmds[0]))
	}
	for _, c := range cmds[1:] {
		g, ok := c.(ledger.Grant)
		if !ok || g.Owner != "n1" || g.Shard%2 != 1 || g.ExpectedEpoch != 1 || g.Takeover {
			t.Fatalf("proposal %v, want a grant of one of n2's shards to n1", FormatCommand(c))
		}
	}
	// The expiry loses its CAS: n2's heartbeat landed first. Its shards
	// are still validly owned (the ledger refuses the grants) and it
	// keeps its place in the ring.
	n2.Seq++
	for at := 100 * time.Millisecond; at <= time.Second; at += 100 * time.Millisecond {
		n2.Seq++
		if cmds, err := p.Plan(now.Add(at), in()); err != nil || len(cmds) > 0 {
			t.Fatalf("%v after the lost expiry: %v %v", at, cmds, err)
		}
	}
	if got := p.RingMembers(); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("ring %v, want n1 and n2", got)
	}
}

// A new leader whose election took longer than the lease (its bound is
// more than Lease·(1+δ) old) does not expire a node that renews with it
// within establishGrace: it gives every node that long to renew. A node
// that stays silent is expired when the grace ends, and NextDeadline names
// that instant.
func TestPlannerEstablishGraceAfterSlowElection(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 4
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	members := []Member{{ID: "n1", Incarnation: 1, State: member.Alive, Health: 1}, {ID: "n2", Incarnation: 1, State: member.Alive, Health: 1}}
	n1 := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 5}
	n2 := ledger.NodeRecord{ID: "n2", Incarnation: 1, Liveness: 1, Seq: 5}
	var shards []ledger.ShardRecord
	for s := range uint32(4) {
		owner := []string{"n1", "n2"}[s%2]
		shards = append(shards, ledger.ShardRecord{Shard: s, Epoch: 1, Owner: owner, OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned})
	}
	in := Input{Members: members, Nodes: []ledger.NodeRecord{n1, n2}, Shards: shards}
	// The last confirm of the old term was two leases ago.
	p.Establish(t0, in, t0.Add(-2*cfg.Lease))
	grace := cfg.establishGrace()
	if got := p.NextDeadline(); !got.Equal(t0.Add(grace)) {
		t.Fatalf("NextDeadline %v after establishing, want the end of the grace %v", got.Sub(t0), grace)
	}
	if cmds, _ := p.Plan(t0, in); len(cmds) > 0 {
		t.Fatalf("expired at once after a slow election: %v", cmds)
	}
	// n1 renews within the grace; n2 does not.
	if err := p.Renew(t0.Add(grace/2), n1, 1, 1); err != nil {
		t.Fatal(err)
	}
	cmds, _ := p.Plan(t0.Add(grace), in)
	if len(cmds) == 0 {
		t.Fatalf("silent n2 not expired when the grace ended")
	}
	for _, c := range cmds {
		if e, ok := c.(ledger.ExpireNode); ok && e.Node != "n2" {
			t.Fatalf("expired %s, which renewed within the grace", e.Node)
		}
	}
	if e, ok := cmds[0].(ledger.ExpireNode); !ok || e.Node != "n2" {
		t.Fatalf("first proposal %v, want expire n2", FormatCommand(cmds[0]))
	}
	if got, want := p.NextDeadline(), t0.Add(grace/2+cfg.ExpireAfter()); !got.Equal(want) {
		t.Fatalf("NextDeadline %v, want n1's expiry %v (n2 is expiring)", got.Sub(t0), want.Sub(t0))
	}
}

// The fenced rule gets the same grace after a slow election: a new leader
// whose bound is older than FencedAfter does not take fenced shards from
// a node that renews with it within establishGrace; a silent owner's
// fenced shards go when the grace ends.
func TestPlannerFencedGraceAfterSlowElection(t *testing.T) {
	cfg := TestConfig()
	cfg.Ring.Partitions = 4
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	members := []Member{{ID: "n1", Incarnation: 1, State: member.Alive, Health: 1}, {ID: "n2", Incarnation: 1, State: member.Alive, Health: 1}}
	n1 := ledger.NodeRecord{ID: "n1", Incarnation: 1, Liveness: 1, Seq: 5}
	n2 := ledger.NodeRecord{ID: "n2", Incarnation: 1, Liveness: 1, Seq: 5}
	var shards []ledger.ShardRecord
	for s := range uint32(4) {
		owner := []string{"n1", "n2"}[s%2]
		shards = append(shards, ledger.ShardRecord{Shard: s, Epoch: 1, Owner: owner, OwnerIncarnation: 1, OwnerLiveness: 1, State: ledger.ShardOwned})
	}
	in := Input{Members: members, Nodes: []ledger.NodeRecord{n1, n2}, Shards: shards,
		Fenced: []ledger.ShardRange{{First: 0, Last: 3}}, Cluster: ledger.ClusterInfo{Version: ledger.VersionFencedTakeover}}
	// The old term's last confirm: just over FencedAfter ago.
	p.Establish(t0, in, t0.Add(-cfg.fencedAfter()-time.Millisecond))
	grace := cfg.establishGrace()
	if cmds, _ := p.Plan(t0, in); len(cmds) > 0 {
		t.Fatalf("fenced takeovers at once after a slow election: %v", cmds)
	}
	if got := p.NextDeadline(); !got.Equal(t0.Add(grace)) {
		t.Fatalf("NextDeadline %v, want the end of the grace %v", got.Sub(t0), grace)
	}
	if err := p.Renew(t0.Add(grace/2), n1, 1, 1); err != nil {
		t.Fatal(err)
	}
	cmds, _ := p.Plan(t0.Add(grace), in)
	if len(cmds) == 0 {
		t.Fatal("silent n2's fenced shards not taken over when the grace ended")
	}
	for _, c := range cmds {
		g, ok := c.(ledger.Grant)
		if !ok || !g.Takeover || g.Owner != "n1" || g.Shard%2 != 1 {
			t.Fatalf("proposal %v, want fenced takeovers of n2's shards by n1", FormatCommand(c))
		}
	}
}
