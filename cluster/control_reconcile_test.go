package cluster

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mem(id, addr string, st MemberState) Member {
	return Member{Meta: Meta{ID: id, RaftAddr: addr, Incarnation: 1}, State: st}
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
			s.Members = []Member{alive("a"), mem("b", "b:1", StateLeft), alive("c"), alive("d"), alive("e")}
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
			s.Members = []Member{alive("a"), mem("b", "b:1", StateLeft), alive("c"), alive("d")}
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
	states := []MemberState{StateAlive, StateAlive, StateAlive, StateSuspect, StateDead, StateLeft}
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
				s.Members = append(s.Members, mem(id, id+":1", st))
			}
			if st == StateLeft && i != 0 {
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
				cfg[c.ID] = true
			case changeAddNonvoter:
				cfg[c.ID] = false
			}
		}
		if count() > max(s.MaxVoters, floor) {
			t.Fatalf("iter %d: %d voters > MaxVoters %d: %v", iter, count(), s.MaxVoters, plan)
		}
	}
}
