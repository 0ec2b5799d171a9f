package ring

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/buraksezer/consistent"
	"pgregory.net/rapid"
)

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // substring naming the bad value
	}{
		{"negative partitions", func(c *Config) { c.Partitions = -5 }, "Partitions = -5"},
		{"zero partitions", func(c *Config) { c.Partitions = 0 }, "Partitions = 0"},
		{"huge partitions", func(c *Config) { c.Partitions = MaxPartitions + 1 }, fmt.Sprintf("Partitions = %d", MaxPartitions+1)},
		{"NaN load", func(c *Config) { c.Load = math.NaN() }, "Load = NaN"},
		{"+Inf load", func(c *Config) { c.Load = math.Inf(1) }, "Load = +Inf"},
		{"-Inf load", func(c *Config) { c.Load = math.Inf(-1) }, "Load = -Inf"},
		{"load below 1", func(c *Config) { c.Load = 0.99 }, "Load = 0.99"},
		{"zero load", func(c *Config) { c.Load = 0 }, "Load = 0"},
		{"RF 1", func(c *Config) { c.ReplicationFactor = 1 }, "ReplicationFactor = 1"},
		{"RF 0", func(c *Config) { c.ReplicationFactor = 0 }, "ReplicationFactor = 0"},
		{"NaN min load", func(c *Config) { c.MinLoad = math.NaN() }, "MinLoad = NaN"},
		{"negative min load", func(c *Config) { c.MinLoad = -0.1 }, "MinLoad = -0.1"},
		{"min load above 1", func(c *Config) { c.MinLoad = 1.5 }, "MinLoad = 1.5"},
		{"RF huge", func(c *Config) { c.ReplicationFactor = MaxReplicationFactor + 1 }, "ReplicationFactor = 1025"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %q", err, tc.want)
			}
			if _, err := New(c, []string{"a", "b"}); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New() = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestBadMembers(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name    string
		members []string
		is      error
		want    string
	}{
		{"empty name", []string{"a", ""}, ErrInvalidMember, "empty member name"},
		{"duplicate", []string{"b", "a", "b"}, ErrDuplicateMember, `"b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(cfg, tc.members)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New() = %v, want %v naming %q", err, tc.is, tc.want)
			}
		})
	}
	for _, w := range []float64{math.NaN(), math.Inf(1), -1} {
		_, err := NewWeighted(cfg, []Member{{Name: "ok", Weight: 1}, {Name: "bad", Weight: w}})
		if !errors.Is(err, ErrInvalidMember) || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), fmt.Sprint(w)) {
			t.Fatalf("NewWeighted(weight %v) = %v, want ErrInvalidMember naming member and weight", w, err)
		}
	}
	r, err := NewWeighted(cfg, []Member{{Name: "a"}, {Name: "b", Weight: 1}, {Name: "c", Weight: 0.5}})
	if err != nil || r.Len() != 3 {
		t.Fatalf("NewWeighted valid weights: %v", err)
	}
}

// libPanics reports whether calling consistent v0.10.0 directly panics, to
// show each case below is a real library panic.
func libPanics(members []string, cfg Config) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	ms := make([]consistent.Member, len(members))
	for i, m := range members {
		ms[i] = vnodeMember(m)
	}
	consistent.New(ms, consistent.Config{Hasher: hasher{}, PartitionCount: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor, Load: cfg.Load})
	return false
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

func TestKnownPanicLoadOneIndivisible(t *testing.T) {
	cfg := Config{Partitions: 10, Load: 1, ReplicationFactor: 20}
	if !libPanics(names(3), cfg) {
		t.Fatal("expected consistent to panic")
	}
	// ring raises the library's cap to ceil(P/N) = 4 instead of panicking.
	r, err := New(cfg, names(3))
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, r)
	if r.MaxLoad() != 4 {
		t.Fatalf("P=10 N=3 Load=1: max=%d, want 4", r.MaxLoad())
	}
	// And Load 1 is exact when N divides P.
	r, err = New(Config{Partitions: 12, Load: 1, ReplicationFactor: 20}, names(3))
	if err != nil || r.MaxLoad() != 4 || r.MinLoad() != 4 {
		t.Fatalf("Load 1 with 3 | 12: err=%v max=%d min=%d", err, r.MaxLoad(), r.MinLoad())
	}
}

func TestKnownPanicMoreMembersThanPartitions(t *testing.T) {
	cfg := Config{Partitions: 3, Load: 1.25, ReplicationFactor: 20}
	if !libPanics(names(4), cfg) {
		t.Fatal("expected consistent to panic")
	}
	_, err := New(cfg, names(4))
	if !errors.Is(err, ErrTooManyMembers) || !strings.Contains(err.Error(), "4 members for Partitions = 3") {
		t.Fatalf("New = %v, want ErrTooManyMembers naming counts", err)
	}
}

func TestKnownPanicEmptyNonNilMembers(t *testing.T) {
	cfg := DefaultConfig()
	if !libPanics([]string{}, cfg) {
		t.Fatal("expected consistent to panic")
	}
	for _, ms := range [][]string{nil, {}} {
		r, err := New(cfg, ms)
		if err != nil {
			t.Fatalf("New(%#v) = %v, want an empty ring", ms, err)
		}
		if r.Owner(0) != "" || r.Owner(5) != "" || r.MaxLoad() != 0 || r.MinLoad() != 0 || len(r.Members()) != 0 || len(r.Loads()) != 0 {
			t.Fatalf("empty ring not empty: %+v", r)
		}
	}
}

func TestKnownPanicReplicationFactorOne(t *testing.T) {
	cfg := Config{Partitions: 1, Load: 1.25, ReplicationFactor: 1}
	if !libPanics([]string{"a"}, cfg) {
		t.Fatal("expected consistent to panic")
	}
	if _, err := New(cfg, []string{"a"}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ReplicationFactor = 1") {
		t.Fatalf("New = %v, want ErrInvalidConfig naming ReplicationFactor", err)
	}
}

// Issue #17: with RF > 10, "a"+"10" and "a1"+"0" collide; removing one then
// nil-panics inside the library.
func TestKnownPanicDigitNames(t *testing.T) {
	cfg := Config{Partitions: 271, Load: 1.25, ReplicationFactor: 20}
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		c := consistent.New([]consistent.Member{vnodeMember("a"), vnodeMember("a1")}, consistent.Config{
			Hasher: hasher{}, PartitionCount: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor, Load: cfg.Load})
		c.Remove("a1")
		return false
	}()
	if !panicked {
		t.Fatal("expected consistent to panic on Remove")
	}
	both, err := New(cfg, []string{"a", "a1"})
	if err != nil {
		t.Fatal(err)
	}
	one, err := New(cfg, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Loads()["a"] != cfg.Partitions || both.Loads()["a"] == 0 || both.Loads()["a1"] == 0 {
		t.Fatalf("loads: both=%v one=%v", both.Loads(), one.Loads())
	}
	for _, m := range Diff(both, one) {
		if m.From != "a1" || m.To != "a" {
			t.Fatalf("unexpected move %+v", m)
		}
	}
}

func TestShardFor(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.ShardFor([]byte("x")), ShardFor(cfg.Partitions, []byte("x")); got != want {
		t.Fatalf("method %d != function %d", got, want)
	}
	for _, p := range []int{0, -1} {
		if got := ShardFor(p, []byte("x")); got != 0 {
			t.Fatalf("ShardFor(%d) = %d, want 0", p, got)
		}
	}
	// Same function as the library's key → partition mapping.
	c := consistent.New(nil, consistent.Config{Hasher: hasher{}, PartitionCount: 271})
	for i := range 1000 {
		k := []byte(fmt.Sprint("key-", i))
		if got, want := ShardFor(271, k), c.FindPartitionID(k); int(got) != want {
			t.Fatalf("ShardFor(%q) = %d, consistent says %d", k, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ShardFor(1024, []byte("tenant-42")) }); n != 0 {
		t.Fatalf("ShardFor allocates %v", n)
	}
	r, _ := New(cfg, names(5))
	if n := testing.AllocsPerRun(100, func() { _ = r.Owner(17) }); n != 0 {
		t.Fatalf("Owner allocates %v", n)
	}
	if r.Owner(uint32(cfg.Partitions)) != "" || r.Owner(math.MaxUint32) != "" {
		t.Fatal("out-of-range shard must have no owner")
	}
	if r.OwnerOfKey([]byte("k")) != r.Owner(cfg.ShardFor([]byte("k"))) {
		t.Fatal("OwnerOfKey disagrees with Owner(ShardFor)")
	}
}

func TestDiffEdges(t *testing.T) {
	cfg := Config{Partitions: 8, Load: 1.25, ReplicationFactor: 4}
	r, err := New(cfg, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(nil, r); len(d) != 8 || d[0] != (Move{0, "", "x"}) || d[7].Shard != 7 {
		t.Fatalf("Diff(nil, r) = %v", d)
	}
	if d := Diff(r, nil); len(d) != 8 || d[3] != (Move{3, "x", ""}) {
		t.Fatalf("Diff(r, nil) = %v", d)
	}
	if d := Diff(r, r); len(d) != 0 {
		t.Fatalf("Diff(r, r) = %v", d)
	}
	if d := Diff(nil, nil); len(d) != 0 {
		t.Fatalf("Diff(nil, nil) = %v", d)
	}
}

// --- property tests ---

// genNames draws a set of distinct member names, many ending in digits.
func genNames(t *rapid.T, maxN int) []string {
	n := rapid.IntRange(0, maxN).Draw(t, "n")
	name := rapid.OneOf(
		rapid.StringMatching(`[a-c][0-9]{0,3}`),
		rapid.StringMatching(`node-[0-9]{1,3}`),
		rapid.StringN(1, 8, -1),
	)
	return rapid.SliceOfNDistinct(name, n, n, func(s string) string { return s }).Draw(t, "members")
}

func genConfig(t *rapid.T) Config {
	return Config{
		Partitions:        rapid.IntRange(1, 1500).Draw(t, "partitions"),
		Load:              rapid.SampledFrom([]float64{1, 1.05, 1.1, 1.25, 1.5, 2, 10}).Draw(t, "load"),
		ReplicationFactor: rapid.IntRange(2, 64).Draw(t, "rf"),
		MinLoad:           rapid.SampledFrom([]float64{0, 0.5, 0.6, 0.8, 1}).Draw(t, "minLoad"),
	}
}

func fingerprint(r *Ring) string {
	var b strings.Builder
	for s := 0; s < r.cfg.Partitions; s++ {
		b.WriteString(r.Owner(uint32(s)))
		b.WriteByte(0)
	}
	return b.String()
}

// checkInvariants verifies a built ring: every shard owned by a member,
// loads consistent, the max bound and the min pass floor.
func checkInvariants(t interface{ Fatalf(string, ...any) }, r *Ring) {
	cfg, ms := r.Config(), r.Members()
	if !slices.IsSorted(ms) {
		t.Fatalf("members not sorted: %q", ms)
	}
	if len(ms) == 0 {
		for s := 0; s < cfg.Partitions; s++ {
			if r.Owner(uint32(s)) != "" {
				t.Fatalf("empty ring owns shard %d", s)
			}
		}
		return
	}
	count := map[string]int{}
	for s := 0; s < cfg.Partitions; s++ {
		o := r.Owner(uint32(s))
		if _, found := slices.BinarySearch(ms, o); !found {
			t.Fatalf("shard %d owned by non-member %q", s, o)
		}
		count[o]++
	}
	loads := r.Loads()
	total := 0
	for _, m := range ms {
		if loads[m] != count[m] {
			t.Fatalf("Loads()[%q] = %d, counted %d", m, loads[m], count[m])
		}
		total += loads[m]
	}
	if total != cfg.Partitions {
		t.Fatalf("loads sum to %d, want %d", total, cfg.Partitions)
	}
	n := len(ms)
	avg := float64(cfg.Partitions) / float64(n)
	if bound := int(math.Ceil(avg * cfg.Load)); r.MaxLoad() > bound || r.MaxLoad() > cfg.MaxLoadFor(n) {
		t.Fatalf("max load %d > ceil(avg %.2f × load %v) = %d or MaxLoadFor = %d", r.MaxLoad(), avg, cfg.Load, bound, cfg.MaxLoadFor(n))
	}
	if r.MinLoad() < minTarget(cfg, n) {
		t.Fatalf("min load %d < target %d", r.MinLoad(), minTarget(cfg, n))
	}
}

func TestPropDeterministicAndValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		ms := genNames(t, 40)
		r1, err1 := New(cfg, ms)
		shuffled := rapid.Permutation(ms).Draw(t, "shuffled")
		r2, err2 := New(cfg, shuffled)
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("order changed the error: %v vs %v", err1, err2)
		}
		if err1 != nil {
			if errors.Is(err1, ErrInternal) || errors.Is(err1, ErrNoRoom) {
				t.Fatalf("valid-looking input failed: %v", err1)
			}
			return
		}
		if fingerprint(r1) != fingerprint(r2) {
			t.Fatalf("shuffled input gave a different assignment")
		}
		checkInvariants(t, r1)
	})
}

// TestPropMovement checks that join and leave move a bounded multiple of
// the optimum for non-degenerate rings (≥ 10 shards per member, default
// load and RF) and logs the worst ratio seen.
func TestPropMovement(t *testing.T) {
	worstJoin, worstLeave := 0.0, 0.0
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Partitions = rapid.SampledFrom([]int{271, 512, 1024}).Draw(t, "partitions")
		n := rapid.IntRange(1, 25).Draw(t, "n")
		ms := names(n + 1)
		base, err := New(cfg, ms[:n])
		if err != nil {
			t.Fatal(err)
		}
		join, err := New(cfg, ms)
		if err != nil {
			t.Fatal(err)
		}
		leaver := rapid.IntRange(0, n-1).Draw(t, "leaver")
		leave, err := New(cfg, slices.Delete(slices.Clone(ms[:n]), leaver, leaver+1))
		if err != nil {
			t.Fatal(err)
		}
		p := float64(cfg.Partitions)
		jr := float64(len(Diff(base, join))) / (p / float64(n+1))
		lr := float64(len(Diff(base, leave))) / (p / float64(n))
		worstJoin, worstLeave = max(worstJoin, jr), max(worstLeave, lr)
		// A joiner must end up with shards, and a leaver's shards all move.
		if join.Loads()[ms[n]] == 0 {
			t.Fatalf("joiner got no shards")
		}
		for _, m := range Diff(base, leave) {
			if m.To == ms[leaver] || (m.To == "" && n > 1) {
				t.Fatalf("bad move on leave: %+v", m)
			}
		}
		if n > 1 && p/float64(n) >= 10 && (jr > 3 || lr > 3) {
			t.Fatalf("moved join %.2f× / leave %.2f× the optimum", jr, lr)
		}
	})
	t.Logf("worst moved/optimal: join %.2f, leave %.2f", worstJoin, worstLeave)
}

func TestRecoverLibraryPanic(t *testing.T) {
	saved := newConsistent
	t.Cleanup(func() { newConsistent = saved })
	newConsistent = func([]consistent.Member, consistent.Config) *consistent.Consistent {
		panic("boom")
	}
	r, err := New(DefaultConfig(), []string{"a", "b"})
	if r != nil || !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("New = %v, %v; want ErrInternal carrying the panic", r, err)
	}
}

func TestNilRing(t *testing.T) {
	var r *Ring
	if r.Owner(0) != "" || r.OwnerOfKey([]byte("k")) != "" || r.Len() != 0 || r.Members() != nil ||
		len(r.Loads()) != 0 || r.MaxLoad() != 0 || r.MinLoad() != 0 || r.Config() != (Config{}) {
		t.Fatal("nil ring must behave as an empty ring")
	}
}

// Members returns a copy: mutating it must not change the ring.
func TestImmutable(t *testing.T) {
	in := []string{"b", "a", "c"}
	r, err := New(DefaultConfig(), in)
	if err != nil {
		t.Fatal(err)
	}
	before := fingerprint(r)
	in[0] = "zzz"
	ms := r.Members()
	ms[0] = "yyy"
	if got := r.Members(); !slices.Equal(got, []string{"a", "b", "c"}) || fingerprint(r) != before {
		t.Fatalf("ring changed through a caller's slice: %q", got)
	}
}

func TestMaxLoadFor(t *testing.T) {
	for _, tc := range []struct {
		p, n int
		load float64
		want int
	}{
		{1024, 10, 1.25, 128}, // ceil(102 × 1.25) = 128, library's own cap
		{271, 50, 1.25, 7},    // ceil(5 × 1.25)
		{10, 3, 1, 4},         // library cap 3 leaves no room → ceil(10/3)
		{12, 3, 1, 4},
		{5, 5, 1, 1},
		{5, 6, 1.25, 0}, // more members than partitions
		{5, 0, 1.25, 0},
		{4, 1, 1e6, 4}, // never above P
	} {
		cfg := Config{Partitions: tc.p, Load: tc.load, ReplicationFactor: 2}
		if got := cfg.MaxLoadFor(tc.n); got != tc.want {
			t.Errorf("P=%d N=%d Load=%v: MaxLoadFor = %d, want %d", tc.p, tc.n, tc.load, got, tc.want)
		}
	}
}
