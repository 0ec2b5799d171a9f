package cluster

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/gossip"
)

func mem(id, addr string, st gossip.MemberState) Member {
	return Member{Meta: Meta{ID: id, RaftAddr: addr, Incarnation: 1}, State: st}
}

// withVoter returns m gossiping voter preference p.
func withVoter(m Member, p VoterPreference) Member {
	m.Tags = map[string]string{TagVoter: string(p)}
	return m
}

func planString(cs []raftChange) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %s", c.Kind, c.ID))
	}
	return strings.Join(parts, "; ")
}

func TestPlanReconcile(t *testing.T) {
	t0 := time.Unix(1000, 0)
	v := func(id string) ServerInfo { return ServerInfo{ID: id, Addr: id + ":1", Voter: true} }
	nv := func(id string) ServerInfo { return ServerInfo{ID: id, Addr: id + ":1"} }
	alive := func(id string) Member { return mem(id, id+":1", StateAlive) }
	never := func(id string) Member { return withVoter(alive(id), VoterNever) }
	always := func(id string) Member { return withVoter(alive(id), VoterAlways) }
	// streaming marks members whose binary follows the stream (TagStream).
	streaming := func(ms ...Member) []Member {
		for i := range ms {
			tags := map[string]string{TagStream: "1"}
			for k, v := range ms[i].Tags {
				tags[k] = v
			}
			ms[i].Tags = tags
		}
		return ms
	}
	base := func() reconcileState {
		return reconcileState{Self: "a", Now: t0, MaxVoters: 3, Left: map[string]uint64{}, GoneSince: map[string]time.Time{}, CaughtUp: map[string]bool{}}
	}
	tests := []struct {
		name string
		mod  func(*reconcileState)
		want string
	}{
		{"in line", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("a"), alive("b"), alive("c")}
		}, ""},
		// The committed-state stream (cluster version 5).
		{"stream: members are not added", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 2
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), never("m1"), never("m2"))
		}, ""},
		{"stream: member non-voters removed", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 2
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("m1"), nv("m2")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), never("m1"), never("m2"))
		}, "remove m1; remove m2"},
		{"no version recorded yet: stream members are not added, others are", func(s *reconcileState) {
			s.StreamPending = true
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = append(streaming(alive("a"), alive("b"), alive("c"), never("m1"), alive("d")), never("oldm"))
		}, "add-nonvoter d; add-nonvoter oldm"},
		{"no version recorded yet: member non-voters stay", func(s *reconcileState) {
			s.StreamPending = true
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("m1")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), never("m1"))
		}, ""},
		{"no stream: members are non-voters", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), never("m1"))
		}, "add-nonvoter m1"},
		{"stream: standbys up to Standbys, always first", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 2
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), alive("d"), alive("e"), always("f"), never("m"))
		}, "add-nonvoter f; add-nonvoter d"},
		{"stream: standbys stay, a new better-ranked node waits", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 1
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("e")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), alive("d"), alive("e"))
		}, ""},
		{"stream: standbys beyond Standbys removed, worst-ranked first", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 1
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d"), nv("e"), nv("f")}
			s.Members = streaming(alive("a"), alive("b"), alive("c"), alive("d"), always("e"), alive("f"))
		}, "remove d; remove f"},
		{"stream: a standby is promoted", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 1
			s.Servers = []ServerInfo{v("a"), v("b"), nv("d")}
			s.Members = streaming(alive("a"), alive("b"), alive("d"), alive("e"))
			s.CaughtUp = map[string]bool{"d": true}
		}, "promote d"},
		{"stream: an older binary (no TagStream) is still added as a non-voter", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 0
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = append(streaming(alive("a"), alive("b"), alive("c"), never("m")), alive("old"), never("oldm"))
		}, "add-nonvoter old; add-nonvoter oldm"},
		{"stream: ... and replaced from the stream followers the next round", func(s *reconcileState) {
			s.Stream, s.Standbys = true, 1
			s.Servers = []ServerInfo{v("a"), v("b"), v("d")}
			s.Members = streaming(alive("a"), alive("b"), alive("d"), alive("e"), never("m"))
		}, "add-nonvoter e"},
		{"join adds non-voter", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), alive("d")}
		}, "add-nonvoter d"},
		{"member without raft addr ignored", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), mem("d", "", StateAlive)}
		}, ""},
		{"suspect or dead member not added", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), mem("d", "d:1", StateSuspect), mem("e", "e:1", StateDead)}
		}, ""},
		{"voter that left gossip keeps its place (rolling restart)", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d"), nv("e")}
			s.Members = []Member{alive("a"), mem("b", "b:1", gossip.StateLeft), alive("c"), alive("d"), alive("e")}
			s.Left["b"] = 1
			s.CaughtUp = map[string]bool{"d": true, "e": true}
		}, ""},
		{"non-voter that left gossip is removed", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("b"), alive("c")}
			s.Left["d"] = 1
		}, "remove d"},
		{"voter that left and stayed away is replaced after the timeout", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), mem("b", "b:1", gossip.StateLeft), alive("c"), alive("d")}
			s.Left["b"] = 1
			s.GoneSince["b"] = t0.Add(-time.Hour)
			s.CaughtUp["d"] = true
		}, "promote d; remove b"},
		{"dead hint never removes without timeout", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), mem("b", "b:1", StateDead), alive("c"), alive("d")}
			s.GoneSince["b"] = t0.Add(-24 * time.Hour)
			s.CaughtUp["d"] = true
		}, ""},
		{"dead voter before timeout kept", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), mem("b", "b:1", StateDead), alive("c"), alive("d")}
			s.GoneSince["b"] = t0.Add(-59 * time.Minute)
			s.CaughtUp["d"] = true
		}, ""},
		{"dead voter after timeout replaced: promote first", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("c"), alive("d")} // b reaped
			s.GoneSince["b"] = t0.Add(-time.Hour)
			s.CaughtUp["d"] = true
		}, "promote d; remove b"},
		{"dead voter beyond MaxVoters removed without promotion", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), v("d"), nv("e")}
			s.Members = []Member{alive("a"), alive("c"), alive("d"), alive("e")}
			s.GoneSince["b"] = t0.Add(-2 * time.Hour)
			s.CaughtUp["e"] = true
		}, "remove b"},
		{"dead voter without candidate kept", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("c"), alive("d")}
			s.GoneSince["b"] = t0.Add(-2 * time.Hour)
		}, ""},
		{"suspect voter is not gone", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), mem("b", "b:1", StateSuspect), alive("c"), alive("d")}
			s.GoneSince["b"] = t0.Add(-2 * time.Hour)
			s.CaughtUp["d"] = true
		}, ""},
		{"dead non-voter removed after timeout", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("b"), alive("c")}
			s.GoneSince["d"] = t0.Add(-time.Hour)
		}, "remove d"},
		{"fill voters lowest id first", func(s *reconcileState) {
			s.MaxVoters = 5
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d"), nv("e"), nv("f")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), alive("f"), alive("e"), alive("d")}
			s.CaughtUp = map[string]bool{"f": true, "e": true, "d": false}
		}, "promote e; promote f"},
		{"address reused by new id replaces old entry", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), mem("x", "d:1", StateAlive)}
		}, "remove d; add-nonvoter x"},
		{"address claimed by two alive ids left alone", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), alive("d"), mem("x", "d:1", StateAlive)}
		}, "add-nonvoter x"},
		{"known id at new address updated", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("a"), mem("b", "b:2", StateAlive), alive("c")}
		}, "update-addr b"},
		{"left member not re-added", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), alive("d")}
			s.Left["d"] = 1
		}, ""},
		{"voter=never is not promoted", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), nv("b"), nv("c")}
			s.Members = []Member{alive("a"), never("b"), never("c")}
			s.CaughtUp = map[string]bool{"b": true, "c": true}
		}, ""},
		{"voter=never skipped, next candidate promoted", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), nv("b"), nv("c"), nv("d")}
			s.Members = []Member{alive("a"), never("b"), alive("c"), never("d")}
			s.CaughtUp = map[string]bool{"b": true, "c": true, "d": true}
		}, "promote c"},
		{"voter=always promoted before lower ids", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), nv("b"), nv("c"), nv("y"), nv("z")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), always("y"), always("z")}
			s.CaughtUp = map[string]bool{"b": true, "c": true, "y": true, "z": true}
		}, "promote y; promote z"},
		{"voter=always not caught up waits", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), nv("b"), nv("z")}
			s.Members = []Member{alive("a"), alive("b"), always("z")}
			s.CaughtUp = map[string]bool{"b": true, "z": false}
		}, "promote b"},
		{"voter=always does not displace a voter at MaxVoters", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("z")}
			s.Members = []Member{alive("a"), alive("b"), alive("c"), always("z")}
			s.CaughtUp = map[string]bool{"z": true}
		}, ""},
		{"dead voter replaced by voter=always, never voter=never", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d"), nv("e"), nv("z")}
			s.Members = []Member{alive("a"), alive("c"), never("d"), alive("e"), always("z")}
			s.GoneSince["b"] = t0.Add(-time.Hour)
			s.CaughtUp = map[string]bool{"d": true, "e": true, "z": true}
		}, "promote z; remove b"},
		{"dead voter with only voter=never candidates kept", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), alive("c"), never("d")}
			s.GoneSince["b"] = t0.Add(-time.Hour)
			s.CaughtUp = map[string]bool{"d": true}
		}, ""},
		{"voter turned voter=never demoted after its replacement", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), never("b"), alive("c"), alive("d")}
			s.CaughtUp = map[string]bool{"d": true}
		}, "promote d; demote b"},
		{"voter turned voter=never kept without replacement", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{alive("a"), never("b"), alive("c"), alive("d")}
		}, ""},
		{"voter=never beyond MaxVoters demoted without promotion", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), v("d"), nv("e")}
			s.Members = []Member{alive("a"), never("b"), alive("c"), alive("d"), alive("e")}
			s.CaughtUp = map[string]bool{"e": true}
		}, "demote b"},
		{"leader gossiping voter=never not demoted by itself", func(s *reconcileState) {
			s.Servers = []ServerInfo{v("a"), v("b"), v("c"), nv("d")}
			s.Members = []Member{never("a"), alive("b"), alive("c"), alive("d")}
			s.CaughtUp = map[string]bool{"d": true}
		}, ""},
		{"never removes self", func(s *reconcileState) {
			s.DeadVoterTimeout = time.Hour
			s.Servers = []ServerInfo{v("a"), v("b"), v("c")}
			s.Members = []Member{alive("b"), alive("c")}
			s.Left["a"] = 1
			s.GoneSince["a"] = t0.Add(-2 * time.Hour)
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mod(&s)
			if got := planString(planReconcile(s)); got != tc.want {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

// The plan never depends on the order of its inputs, and never lowers the
// voter count below min(current, MaxVoters) except for graceful leaves.
func TestPlanReconcileProperties(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	defer func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	}()
	states := []gossip.MemberState{StateAlive, StateAlive, StateAlive, StateSuspect, StateDead, gossip.StateLeft}
	for iter := range 2000 {
		s := reconcileState{Self: "n0", Now: time.Unix(5000, 0), MaxVoters: []int{1, 3, 5}[rng.Intn(3)],
			Left: map[string]uint64{}, GoneSince: map[string]time.Time{}, CaughtUp: map[string]bool{}}
		if rng.Intn(2) == 0 {
			s.DeadVoterTimeout = time.Minute
		}
		n := 1 + rng.Intn(8)
		voters := 0
		for i := range n {
			id := fmt.Sprintf("n%d", i)
			if i == 0 || rng.Intn(3) > 0 {
				voter := i == 0 || (voters < s.MaxVoters && rng.Intn(2) == 0)
				if voter {
					voters++
				}
				s.Servers = append(s.Servers, ServerInfo{ID: id, Addr: id + ":1", Voter: voter})
			}
			st := states[rng.Intn(len(states))]
			if i == 0 {
				st = StateAlive
			}
			if rng.Intn(5) > 0 {
				m := mem(id, id+":1", st)
				if p := []VoterPreference{"", VoterAuto, VoterAlways, VoterNever}[rng.Intn(4)]; p != "" {
					m = withVoter(m, p)
				}
				s.Members = append(s.Members, m)
			}
			if st == gossip.StateLeft && i != 0 {
				s.Left[id] = 1
			}
			if st != StateAlive && st != StateSuspect && rng.Intn(2) == 0 {
				s.GoneSince[id] = s.Now.Add(-time.Duration(rng.Intn(120)) * time.Second)
			}
			s.CaughtUp[id] = rng.Intn(2) == 0
		}
		plan := planReconcile(s)
		shuffled := s
		shuffled.Servers = append([]ServerInfo(nil), s.Servers...)
		shuffled.Members = append([]Member(nil), s.Members...)
		rng.Shuffle(len(shuffled.Servers), func(i, j int) { shuffled.Servers[i], shuffled.Servers[j] = shuffled.Servers[j], shuffled.Servers[i] })
		rng.Shuffle(len(shuffled.Members), func(i, j int) { shuffled.Members[i], shuffled.Members[j] = shuffled.Members[j], shuffled.Members[i] })
		if again := planReconcile(shuffled); !reflect.DeepEqual(plan, again) {
			t.Fatalf("iter %d: plan depends on input order:\n%v\n%v", iter, plan, again)
		}
		// Replay: voters removed for anything but a leave are replaced first.
		cfg := map[string]bool{}
		for _, sv := range s.Servers {
			cfg[sv.ID] = sv.Voter
		}
		count := func() int {
			c := 0
			for _, v := range cfg {
				if v {
					c++
				}
			}
			return c
		}
		floor := count()
		pref := map[string]VoterPreference{}
		for _, m := range s.Members {
			pref[m.ID] = VoterPreferenceOf(m.Meta)
		}
		for _, c := range plan {
			switch c.Kind {
			case changeRemove:
				if c.ID == s.Self {
					t.Fatalf("iter %d: removes self: %v", iter, plan)
				}
				wasVoter := cfg[c.ID]
				delete(cfg, c.ID)
				if _, left := s.Left[c.ID]; left && wasVoter {
					floor--
				}
				if wasVoter && count() < floor && !strings.HasPrefix(c.Reason, "address") {
					t.Fatalf("iter %d: voter %s removed without replacement: %v", iter, c.ID, plan)
				}
			case changePromote:
				if !s.CaughtUp[c.ID] {
					t.Fatalf("iter %d: promoted %s which is not caught up", iter, c.ID)
				}
				if pref[c.ID] == VoterNever {
					t.Fatalf("iter %d: promoted %s which gossips voter=never: %v", iter, c.ID, plan)
				}
				cfg[c.ID] = true
			case changeDemote:
				if pref[c.ID] != VoterNever || c.ID == s.Self || !cfg[c.ID] {
					t.Fatalf("iter %d: demoted %s (pref %q, voter %v): %v", iter, c.ID, pref[c.ID], cfg[c.ID], plan)
				}
				cfg[c.ID] = false
				if count() < floor {
					t.Fatalf("iter %d: voter %s demoted without replacement: %v", iter, c.ID, plan)
				}
			case changeAddNonvoter:
				cfg[c.ID] = false
			}
		}
		if count() > max(s.MaxVoters, floor) {
			t.Fatalf("iter %d: %d voters > MaxVoters %d: %v", iter, count(), s.MaxVoters, plan)
		}
	}
}

// Bootstrap voters skip voter=never and take voter=always first; with too
// few that may vote there is no choice at all.
func TestBootstrapVoters(t *testing.T) {
	m := func(id string, p VoterPreference) Member {
		return withVoter(mem(id, id+":1", StateAlive), p)
	}
	ids := func(ms []Member) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		name    string
		members []Member
		n       int
		want    string
	}{
		{"auto: lowest ids", []Member{m("a", ""), m("b", VoterAuto), m("c", ""), m("d", "")}, 3, "a,b,c"},
		{"never skipped", []Member{m("a", VoterNever), m("b", ""), m("c", ""), m("d", "")}, 3, "b,c,d"},
		{"always first", []Member{m("a", ""), m("b", ""), m("x", VoterAlways), m("y", VoterAlways), m("z", VoterAlways)}, 3, "x,y,z"},
		{"always then auto", []Member{m("a", ""), m("b", VoterNever), m("z", VoterAlways)}, 2, "z,a"},
		{"too few that may vote", []Member{m("a", VoterNever), m("b", VoterNever), m("c", "")}, 3, ""},
		{"unknown preference is auto", []Member{withVoter(mem("a", "a:1", StateAlive), "maybe"), m("b", "")}, 2, "a,b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]Member(nil), tc.members...)
			if got := ids(bootstrapVoters(in, tc.n)); got != tc.want {
				t.Fatalf("bootstrapVoters = %q, want %q", got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.members) {
				t.Fatalf("bootstrapVoters modified its input")
			}
		})
	}
}

func TestParseVoterPreference(t *testing.T) {
	for in, want := range map[string]VoterPreference{"": VoterAuto, "auto": VoterAuto, "always": VoterAlways, "never": VoterNever} {
		if got, err := ParseVoterPreference(in); err != nil || got != want {
			t.Errorf("ParseVoterPreference(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseVoterPreference("sometimes"); err == nil {
		t.Error("ParseVoterPreference(\"sometimes\") = nil error")
	}
}
