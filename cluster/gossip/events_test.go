package gossip

import (
	"fmt"
	"log/slog"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

func ev(kind EventKind, id string, health float64) Event {
	return Event{Kind: kind, Member: Member{Meta: Meta{ID: id, Health: health}}}
}

func TestCoalescer(t *testing.T) {
	var c coalescer
	c.add(ev(EventJoin, "b", 0.1))
	c.add(ev(EventUpdate, "b", 0.2)) // join + update stays a join, latest member
	c.add(ev(EventUpdate, "a", 0.5))
	c.add(ev(EventFailed, "a", 0.5)) // latest kind wins otherwise
	c.add(ev(EventJoin, "c", 1))
	got := fmt.Sprint(c.flush())
	want := fmt.Sprint([]Event{ev(EventFailed, "a", 0.5), ev(EventJoin, "b", 0.2), ev(EventJoin, "c", 1)})
	if got != want {
		t.Fatalf("flush:\n got %s\nwant %s", got, want)
	}
	if !c.empty() {
		t.Fatalf("not empty after flush")
	}
}

func TestSubscriptionDropsOldest(t *testing.T) {
	m := &Membership{subs: map[*Subscription]struct{}{}}
	s := m.Subscribe(2)
	for i := 1; i <= 5; i++ {
		s.deliver([]Event{ev(EventUpdate, fmt.Sprint(i), 1), ev(EventUpdate, "x", 1)})
	}
	if got := s.Dropped(); got != 6 { // batches 1..3, two events each
		t.Fatalf("dropped %d events, want 6", got)
	}
	first := <-s.C()
	second := <-s.C()
	if first[0].Member.ID != "4" || second[0].Member.ID != "5" {
		t.Fatalf("kept %v and %v, want the newest two batches", first, second)
	}
	s.Close()
	s.Close()
	if _, ok := <-s.C(); ok {
		t.Fatalf("channel open after Close")
	}
	s.deliver([]Event{ev(EventJoin, "late", 1)}) // must not panic
}

func observe(v *view, name, ip string, port uint16, meta Meta, gone bool, now time.Time) {
	raw, err := EncodeMeta(meta)
	if err != nil {
		panic(err)
	}
	v.observe(name, net.ParseIP(ip), port, raw, gone, now)
}

// The view folds restarts of one id into one member and derives the events.
func TestViewFoldsInstances(t *testing.T) {
	v := newView(slog.New(slog.DiscardHandler), "self#1", "self")
	now := time.Unix(1000, 0)
	old := Meta{ID: "n", Group: "g", Incarnation: 1}
	observe(v, "n#a", "10.0.0.1", 1, old, false, now)
	restarted := Meta{ID: "n", Group: "g", Incarnation: 2}
	observe(v, "n#b", "10.0.0.2", 1, restarted, false, now)
	observe(v, "n#a", "10.0.0.1", 1, old, true, now) // old process detected dead
	leaving := restarted
	leaving.Leaving = true
	observe(v, "n#b", "10.0.0.2", 1, leaving, false, now)
	observe(v, "n#b", "10.0.0.2", 1, leaving, true, now)
	// Another instance of our own id is never folded into the view.
	observe(v, "self#2", "10.0.0.9", 1, Meta{ID: "self", Group: "g"}, false, now)

	got := fmt.Sprint(v.take())
	want := "[join n@10.0.0.1:1(alive inc=1) update n@10.0.0.2:1(alive inc=2) update n@10.0.0.2:1(alive inc=2) leave n@10.0.0.2:1(left inc=2)]"
	if got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if ms := v.list(); len(ms) != 1 || ms[0].State != StateLeft {
		t.Fatalf("members %v", ms)
	}
	v.reap(now.Add(time.Minute), time.Hour)
	if len(v.list()) != 1 {
		t.Fatalf("reaped too early")
	}
	v.reap(now.Add(2*time.Hour), time.Hour)
	if got := fmt.Sprint(v.take()); got != "[reap n@10.0.0.2:1(left inc=2)]" {
		t.Fatalf("reap events %s", got)
	}
	if len(v.list()) != 0 {
		t.Fatalf("members after reap: %v", v.list())
	}
}

// A burst of changes arrives as one batch.
func TestEventsCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		e.profile = func() Config {
			c := DefaultTestConfig()
			c.CoalescePeriod, c.QuiescentPeriod = 5*time.Second, time.Second
			return c
		}
		n1 := e.start(t, "n1", "tenure", 1)
		sub := n1.Subscribe(8)
		n2 := e.start(t, "n2", "tenure", 1, n1.Local().Addr)
		for i := range 10 {
			if err := n2.UpdateMeta(func(m *Meta) { m.Health = float64(i) / 10 }); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, 10*time.Second, "n1 to see the last update", func() bool {
			mem, _ := memberIn(n1, "n2")
			return mem.Health == 0.9
		})
		time.Sleep(6 * time.Second) // virtual: past CoalescePeriod
		var batches [][]Event
		for len(sub.C()) > 0 {
			batches = append(batches, <-sub.C())
		}
		if len(batches) != 1 {
			t.Fatalf("%d batches for a join and 10 updates: %v", len(batches), batches)
		}
		var got []Event
		for _, e := range batches[0] {
			if e.Member.ID == "n2" {
				got = append(got, e)
			}
		}
		if len(got) != 1 || got[0].Kind != EventJoin || got[0].Member.Health != 0.9 {
			t.Fatalf("events for n2 %v, want one join with health 0.9", got)
		}
		if sub.Dropped() != 0 {
			t.Fatalf("dropped %d", sub.Dropped())
		}
	})
}

// A leave first seen as a failure is corrected by a peer's push/pull state.
func TestViewLeftNamesCorrectFailure(t *testing.T) {
	v := newView(slog.New(slog.DiscardHandler), "self#1", "self")
	now := time.Unix(1000, 0)
	m := Meta{ID: "n", Group: "g", Incarnation: 1}
	observe(v, "n#a", "10.0.0.1", 1, m, false, now)
	observe(v, "n#a", "10.0.0.1", 1, m, true, now) // no Leaving flag seen: failed
	peer := newView(slog.New(slog.DiscardHandler), "p#1", "p")
	m.Leaving = true
	observe(peer, "n#a", "10.0.0.1", 1, m, true, now)

	state := encodeLeftNames(peer.leftNames(maxLeftNames))
	names, err := decodeLeftNames(state)
	if err != nil {
		t.Fatal(err)
	}
	v.markLeft(names, now)
	got := fmt.Sprint(v.take())
	want := "[join n@10.0.0.1:1(alive inc=1) failed n@10.0.0.1:1(dead inc=1) leave n@10.0.0.1:1(left inc=1)]"
	if got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	for _, bad := range [][]byte{{}, {2}, {1}, {1, 5, 1, 'a'}, {1, 1, 1, 'a', 0}, {1, 0xff, 0xff, 0x03}} {
		if _, err := decodeLeftNames(bad); err == nil {
			t.Errorf("decoded %x", bad)
		}
	}
}

func FuzzDecodeLeftNames(f *testing.F) {
	f.Add(encodeLeftNames([]string{"a#1", "b#2"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := decodeLeftNames(b)
		if err == nil && len(names) > 0 {
			if again, err := decodeLeftNames(encodeLeftNames(names)); err != nil || fmt.Sprint(again) != fmt.Sprint(names) {
				t.Fatalf("round trip %q: %q, %v", names, again, err)
			}
		}
	})
}

// A subscriber that never reads does not hold up gossip: the view stays
// current and the overflow is counted.
func TestStalledSubscriberDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		e.profile = func() Config {
			c := DefaultTestConfig()
			c.CoalescePeriod = 0 // one batch per change: overflow fast
			return c
		}
		n1 := e.start(t, "n1", "tenure", 1)
		stalled := n1.Subscribe(1)
		var nodes []*Membership
		for i := 2; i <= 6; i++ {
			nodes = append(nodes, e.start(t, fmt.Sprintf("n%d", i), "tenure", 1, n1.Local().Addr))
		}
		for i, n := range nodes {
			if err := n.UpdateMeta(func(m *Meta) { m.Health = 0.5 }); err != nil {
				t.Fatalf("update n%d: %v", i+2, err)
			}
		}
		waitUntil(t, 10*time.Second, "n1 to see every update", func() bool {
			for _, m := range n1.Members() {
				if m.ID != "n1" && m.Health != 0.5 {
					return false
				}
			}
			return len(n1.Members()) == 6
		})
		if stalled.Dropped() == 0 {
			t.Fatalf("nothing dropped with a full buffer of 1")
		}
		if got := len(stalled.C()); got != 1 {
			t.Fatalf("%d batches buffered, want 1", got)
		}
	})
}

// A crashed member is forgotten after ReapTimeout with EventReap.
func TestReapAfterTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		n1 := e.start(t, "n1", "tenure", 1)
		n2 := e.start(t, "n2", "tenure", 1, n1.Local().Addr)
		events := collectEvents(n1.Subscribe(8))
		waitUntil(t, 10*time.Second, "n2 alive", sees([]*Membership{n1}, "n2", StateAlive, ""))
		e.crash(n2)
		waitUntil(t, 10*time.Second, "n2 dead", sees([]*Membership{n1}, "n2", StateDead, ""))
		dead := time.Now()
		waitUntil(t, 10*time.Minute, "EventReap", events.has(EventReap, "n2"))
		if waited, timeout := time.Since(dead), DefaultTestConfig().ReapTimeout; waited < timeout {
			t.Fatalf("reaped after %v, before ReapTimeout %v", waited, timeout)
		}
		if _, ok := memberIn(n1, "n2"); ok {
			t.Fatalf("n2 still listed after reap")
		}
	})
}
