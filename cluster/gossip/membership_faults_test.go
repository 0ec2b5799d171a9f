package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestConfigValidate(t *testing.T) {
	for _, profile := range []func() Config{DefaultLANConfig, DefaultLocalConfig, DefaultTestConfig} {
		c := profile()
		c.Name = "n1"
		if err := c.Validate(); err != nil {
			t.Fatalf("%s profile: %v", c.Profile, err)
		}
	}
	c := DefaultLocalConfig()
	c.BindAddr = "localhost"
	c.ProbeTimeout = 2 * c.ProbeInterval
	c.SecretKeys = [][]byte{[]byte("short")}
	c.QuiescentPeriod = 0
	c.ClusterLabel = strings.Repeat("x", 300)
	err := c.Validate()
	if !errors.Is(err, ErrMembershipConfig) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"Name", `BindAddr "localhost"`, "ProbeTimeout 500ms", "SecretKeys[0] is 5 bytes", "QuiescentPeriod 0s", "ClusterLabel is 300 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if _, err := NewMembership(c, Meta{}); !errors.Is(err, ErrMembershipConfig) {
		t.Fatalf("NewMembership accepted an invalid config: %v", err)
	}
	ok := DefaultTestConfig()
	ok.Name = "n1"
	ok.Transport, _ = NewMemNetwork(1).NewTransport("10.0.0.1:1")
	if _, err := NewMembership(ok, Meta{ID: "n2"}); !errors.Is(err, ErrMembershipConfig) {
		t.Fatalf("Meta.ID differing from Name: %v", err)
	}
	if _, err := NewMembership(ok, Meta{Health: 3}); !errors.Is(err, ErrInvalidMeta) {
		t.Fatalf("invalid meta: %v", err)
	}
}

func TestClosedMembership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		m := e.start(t, "n1", "tenure", 1)
		sub := m.Subscribe(1)
		if err := m.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := m.Shutdown(); err != nil {
			t.Fatalf("second shutdown: %v", err)
		}
		if _, ok := <-sub.C(); ok {
			t.Fatalf("subscription open after shutdown")
		}
		if _, ok := <-m.Subscribe(1).C(); ok {
			t.Fatalf("subscription after shutdown is open")
		}
		if err := m.UpdateMeta(func(*Meta) {}); !errors.Is(err, ErrMembershipClosed) {
			t.Fatalf("update after shutdown: %v", err)
		}
		if err := m.Leave(context.Background()); !errors.Is(err, ErrMembershipClosed) {
			t.Fatalf("leave after shutdown: %v", err)
		}
		if _, err := m.Join(context.Background(), []string{"10.9.9.9:1"}); !errors.Is(err, ErrMembershipClosed) {
			t.Fatalf("join after shutdown: %v", err)
		}
		if m.Local().ID != "n1" {
			t.Fatalf("local after shutdown: %+v", m.Local())
		}
	})
}

// After a partition lasts long enough for both sides to reap each other,
// only the periodic rejoin of seeds and failed members merges them again.
func TestPartitionHeals(t *testing.T) {
	for _, rejoin := range []bool{true, false} {
		t.Run(fmt.Sprintf("rejoin=%v", rejoin), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := NewMemNetwork(7)
				logs := newLogBuffer(t)
				t.Cleanup(func() { time.Sleep(time.Minute); synctest.Wait() })
				var nodes []*Membership
				var addrs []string
				for i := 1; i <= 4; i++ {
					addr := fmt.Sprintf("10.0.0.%d:7946", i)
					tr, err := nw.NewTransport(addr)
					if err != nil {
						t.Fatal(err)
					}
					cfg := DefaultTestConfig()
					cfg.Name = fmt.Sprintf("n%d", i)
					cfg.Transport = tr
					cfg.Logger = slogFor(logs)
					if !rejoin {
						cfg.RejoinInterval = 0
					}
					cfg.Seeds = []string{"10.0.0.1:7946"}
					m, err := NewMembership(cfg, Meta{Health: 1})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = m.Shutdown() })
					if i > 1 {
						if _, err := m.Join(context.Background(), nil); err != nil {
							t.Fatal(err)
						}
					}
					nodes = append(nodes, m)
					addrs = append(addrs, addr)
				}
				all := func() bool {
					for _, n := range nodes {
						if aliveIDs(n) != "n1,n2,n3,n4" {
							return false
						}
					}
					return true
				}
				waitUntil(t, 10*time.Second, "4 alive", all)
				nw.Partition(addrs[:2], addrs[2:])
				waitUntil(t, 10*time.Second, "each side sees the other dead", func() bool {
					return aliveIDs(nodes[0]) == "n1,n2" && aliveIDs(nodes[1]) == "n1,n2" &&
						aliveIDs(nodes[2]) == "n3,n4" && aliveIDs(nodes[3]) == "n3,n4"
				})
				// Past GossipToTheDeadTime: memberlist forgets the other side.
				time.Sleep(3 * DefaultTestConfig().GossipToTheDeadTime)
				nw.Heal()
				healed := time.Now()
				if !rejoin {
					time.Sleep(time.Minute)
					if all() {
						t.Fatalf("healed without rejoin: the test no longer shows why rejoin exists")
					}
					return
				}
				waitUntil(t, time.Minute, "partition to heal", all)
				t.Logf("healed %v (virtual) after the network did", time.Since(healed))
			})
		})
	}
}

func TestKeyringRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		k1 := bytes.Repeat([]byte{1}, 32)
		k2 := bytes.Repeat([]byte{2}, 16)
		base := e.profile
		e.profile = func() Config { c := base(); c.SecretKeys = [][]byte{k1}; return c }
		n1 := e.start(t, "n1", "tenure", 1)
		n2 := e.start(t, "n2", "tenure", 1, n1.Local().Addr)
		n3 := e.start(t, "n3", "tenure", 1, n1.Local().Addr)
		nodes := []*Membership{n1, n2, n3}
		health := 0.0
		propagates := func(step string) {
			t.Helper()
			health += 0.125
			if err := n3.UpdateMeta(func(m *Meta) { m.Health = health }); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "update after "+step, func() bool {
				for _, n := range nodes {
					if mem, _ := memberIn(n, "n3"); mem.Health != health || aliveIDs(n) != "n1,n2,n3" {
						return false
					}
				}
				return true
			})
		}
		propagates("start")
		for _, step := range []struct {
			name string
			do   func(m *Membership) error
		}{
			{"install", func(m *Membership) error { return m.InstallKey(k2) }},
			{"use", func(m *Membership) error { return m.UseKey(k2) }},
			{"remove", func(m *Membership) error { return m.RemoveKey(k1) }},
		} {
			for _, n := range nodes {
				if err := step.do(n); err != nil {
					t.Fatalf("%s on %s: %v", step.name, n.Local().ID, err)
				}
			}
			propagates(step.name)
		}
		if keys := n1.Keys(); len(keys) != 1 || !bytes.Equal(keys[0], k2) {
			t.Fatalf("keys after rotation %x", keys)
		}
		if err := n1.RemoveKey(k2); err == nil {
			t.Fatalf("removed the primary key")
		}
		if err := n1.InstallKey([]byte("bad")); err == nil {
			t.Fatalf("installed a 3-byte key")
		}

		// A node with the retired key, or none, cannot join.
		old := e.start(t, "old", "tenure", 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := old.Join(ctx, []string{n1.Local().Addr}); err == nil {
			t.Fatalf("a node with the retired key joined")
		}
		e.profile = base
		plain := e.start(t, "plain", "tenure", 1)
		if _, err := plain.Join(ctx, []string{n1.Local().Addr}); err == nil {
			t.Fatalf("an unencrypted node joined")
		}
		if err := plain.InstallKey(k1); !errors.Is(err, ErrEncryptionDisabled) {
			t.Fatalf("InstallKey without encryption: %v", err)
		}
		if aliveIDs(n1) != "n1,n2,n3" {
			t.Fatalf("n1 sees %s", aliveIDs(n1))
		}
	})
}

// rawDelegate lets a bare memberlist gossip arbitrary metadata.
type rawDelegate struct{ meta []byte }

func (d rawDelegate) NodeMeta(int) []byte                 { return d.meta }
func (d rawDelegate) NotifyMsg([]byte)                    {}
func (d rawDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d rawDelegate) LocalState(bool) []byte              { return nil }
func (d rawDelegate) MergeRemoteState(buf []byte, _ bool) {}

// Peers with malformed metadata, or metadata that does not match their
// name, are refused and logged; garbage packets and streams are dropped.
func TestMalformedPeersRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewMemNetwork(3)
		logs := newLogBuffer(t)
		t.Cleanup(func() { time.Sleep(time.Minute); synctest.Wait() })
		tr, _ := nw.NewTransport("10.0.0.1:7946")
		cfg := DefaultTestConfig()
		cfg.Name = "n1"
		cfg.Transport = tr
		cfg.Logger = slogFor(logs)
		n1, err := NewMembership(cfg, Meta{Health: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n1.Shutdown() })

		valid, _ := EncodeMeta(Meta{ID: "someone-else", Group: "tenure"})
		for i, raw := range []struct {
			name string
			meta []byte
		}{
			{"garbage#1", []byte{0xde, 0xad, 0xbe, 0xef}},
			{"empty#1", nil},
			{"spoof#1", valid}, // meta names another id
		} {
			rtr, _ := nw.NewTransport(fmt.Sprintf("10.0.1.%d:7946", i+1))
			mc := memberlist.DefaultLocalConfig()
			mc.Name = raw.name
			mc.Transport = rtr
			mc.Label = "tenure"
			mc.Delegate = rawDelegate{meta: raw.meta}
			mc.Logger = log.New(io.Discard, "", 0)
			bad, err := memberlist.Create(mc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bad.Shutdown() })
			_, _ = bad.Join([]string{"10.0.0.1:7946"})
		}
		// Garbage on the wire: raw bytes, a foreign label, a bad stream.
		junk, _ := nw.NewTransport("10.0.2.1:7946")
		rng := rand.New(rand.NewPCG(3, 3))
		for range 50 {
			b := make([]byte, rng.IntN(64))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			_, _ = junk.WriteTo(b, "10.0.0.1:7946")
			labelled, _ := memberlist.AddLabelHeaderToPacket(b, "tenure")
			_, _ = junk.WriteTo(labelled, "10.0.0.1:7946")
		}
		foreign, _ := memberlist.AddLabelHeaderToPacket([]byte{0, 1, 2}, "elsewhere")
		_, _ = junk.WriteTo(foreign, "10.0.0.1:7946")
		if conn, err := junk.DialTimeout("10.0.0.1:7946", time.Second); err == nil {
			go func() { _, _ = conn.Write([]byte("GET / HTTP/1.1\r\n\r\n")); _ = conn.Close() }()
		}
		time.Sleep(5 * time.Second)
		if got := aliveIDs(n1); got != "n1" {
			t.Fatalf("n1 admitted malformed peers: %s", got)
		}
		if n1.Rejected() == 0 {
			t.Fatalf("nothing counted as rejected")
		}
		for _, want := range []string{"ignoring alive message for 'garbage#1'", "ignoring alive message for 'spoof#1'", `unacceptable label \"elsewhere\"`} {
			if !logs.contains(want) {
				t.Errorf("log lacks %q", want)
			}
		}
		// Still healthy: a proper node joins.
		tr2, _ := nw.NewTransport("10.0.0.2:7946")
		cfg.Name, cfg.Transport = "n2", tr2
		n2, err := NewMembership(cfg, Meta{Health: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n2.Shutdown() })
		if _, err := n2.Join(context.Background(), []string{"10.0.0.1:7946"}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, "n2 to join", func() bool { return aliveIDs(n1) == "n1,n2" })
	})
}

// Garbage sent to the real UDP and TCP ports is dropped and logged.
func TestGarbageOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real network")
	}
	e := realEnv(t)
	n1 := e.start(t, "n1", "tenure", 1)
	addr := n1.Local().Addr
	udp, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for _, b := range [][]byte{{0xff, 0xff}, []byte("hello"), {}, bytes.Repeat([]byte{7}, 1000)} {
		_, _ = udp.Write(b)
	}
	tcp, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = tcp.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = tcp.Close()
	waitUntil(t, e.timeout, "garbage to be logged", func() bool {
		return e.logs.contains("unacceptable label") && e.logs.contains("stream")
	})
	n2 := e.start(t, "n2", "tenure", 1, addr)
	waitUntil(t, e.timeout, "n2 to join after the garbage", func() bool { return aliveIDs(n1) == "n1,n2" && aliveIDs(n2) == "n1,n2" })
}

// With 10% packet loss and 2–5 ms of delay on every link, five nodes still
// form a cluster, keep every live node alive, and detect a crash.
func TestLossyNetwork(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := NewMemNetwork(seed)
				nw.SetDefaultLink(2*time.Millisecond, 0.1)
				logs := newLogBuffer(t)
				t.Cleanup(func() { time.Sleep(time.Minute); synctest.Wait() })
				var nodes []*Membership
				for i := 1; i <= 5; i++ {
					addr := fmt.Sprintf("10.0.0.%d:7946", i)
					tr, _ := nw.NewTransport(addr)
					cfg := DefaultTestConfig()
					cfg.Name = fmt.Sprintf("n%d", i)
					cfg.Transport = tr
					cfg.Logger = slogFor(logs)
					cfg.Seeds = []string{"10.0.0.1:7946"}
					m, err := NewMembership(cfg, Meta{Health: 1})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = m.Shutdown() })
					if i > 1 {
						nw.SetLink(addr, "10.0.0.1:7946", 5*time.Millisecond, 0.1)
						if _, err := m.Join(context.Background(), nil); err != nil {
							t.Fatalf("seed %d: %v", seed, err)
						}
					}
					nodes = append(nodes, m)
				}
				for _, n := range nodes {
					waitUntil(t, 30*time.Second, "5 alive", func() bool { return aliveIDs(n) == "n1,n2,n3,n4,n5" })
				}
				sub := nodes[0].Subscribe(64)
				events := collectEvents(sub)
				time.Sleep(10 * time.Second) // virtual: ten seconds of lossy gossip
				for _, id := range []string{"n2", "n3", "n4", "n5"} {
					if events.has(EventFailed, id)() {
						t.Fatalf("seed %d: live %s declared failed:\n%s", seed, id, events)
					}
				}
				nw.Close("10.0.0.5:7946")
				_ = nodes[4].Shutdown()
				waitUntil(t, 30*time.Second, "n5 dead", sees(nodes[:4], "n5", StateDead, ""))
			})
		})
	}
}

// Thirty nodes converge, and detect a crash, in virtual time; the wall time
// shows what the simulation harness can afford.
func TestThirtyNodesSynctest(t *testing.T) {
	start := time.Now()
	var detect time.Duration
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		first := e.start(t, "n01", "tenure", 1)
		nodes := []*Membership{first}
		for i := 2; i <= 30; i++ {
			nodes = append(nodes, e.start(t, fmt.Sprintf("n%02d", i), "tenure", 1, first.Local().Addr))
		}
		waitUntil(t, time.Minute, "30 alive everywhere", func() bool {
			for _, n := range nodes {
				alive := 0
				for _, m := range n.Members() {
					if m.State == StateAlive {
						alive++
					}
				}
				if alive != 30 {
					return false
				}
			}
			return true
		})
		crashed := time.Now()
		e.crash(nodes[29])
		waitUntil(t, time.Minute, "n30 dead everywhere", sees(nodes[:29], "n30", StateDead, ""))
		detect = time.Since(crashed)
	})
	t.Logf("30 nodes: crash detected by all after %v virtual; wall time %v", detect, time.Since(start).Round(time.Millisecond))
}
