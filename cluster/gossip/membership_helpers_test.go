package gossip

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer is an slog handler that keeps every record, so a test can check
// that something was logged and print the log when it fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) handler() slog.Handler {
	return slog.NewTextHandler(&lockedWriter{b: b}, &slog.HandlerOptions{Level: slog.LevelDebug})
}

type lockedWriter struct{ b *logBuffer }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.b.buf.Write(p)
}

func (b *logBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newLogBuffer returns a log buffer printed (tail) if t fails.
func newLogBuffer(t testing.TB) *logBuffer {
	b := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			s := b.String()
			if len(s) > 20000 {
				s = "…" + s[len(s)-20000:]
			}
			t.Logf("log:\n%s", s)
		}
	})
	return b
}

// waitUntil polls cond until it holds or timeout passes. Inside a synctest
// bubble the time is virtual.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memberIn returns the member with id as m sees it.
func memberIn(m *Membership, id string) (Member, bool) {
	for _, mem := range m.Members() {
		if mem.ID == id {
			return mem, true
		}
	}
	return Member{}, false
}

// sees reports whether every observer sees id in state (and at addr when
// addr is not empty).
func sees(observers []*Membership, id string, state MemberState, addr string) func() bool {
	return func() bool {
		for _, o := range observers {
			mem, ok := memberIn(o, id)
			if !ok || mem.State != state || (addr != "" && mem.Addr != addr) {
				return false
			}
		}
		return true
	}
}

// aliveIDs returns the ids m sees alive, sorted.
func aliveIDs(m *Membership) string {
	var ids []string
	for _, mem := range m.Members() {
		if mem.State == StateAlive {
			ids = append(ids, mem.ID)
		}
	}
	return strings.Join(ids, ",")
}

// eventLog collects a subscription's events.
type eventLog struct {
	mu     sync.Mutex
	events []Event
	done   chan struct{}
}

func collectEvents(s *Subscription) *eventLog {
	l := &eventLog{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for batch := range s.C() {
			l.mu.Lock()
			l.events = append(l.events, batch...)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) has(kind EventKind, id string) func() bool {
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, e := range l.events {
			if e.Kind == kind && e.Member.ID == id {
				return true
			}
		}
		return false
	}
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.events {
		fmt.Fprintln(&b, e)
	}
	return b.String()
}

// testEnv abstracts the network so one scenario runs on real loopback
// UDP/TCP and on a MemNetwork inside synctest.
type testEnv struct {
	name    string
	logs    *logBuffer
	profile func() Config
	// transport prepares cfg for a new node at addr, or a fresh address
	// when addr is "" (nil = real network, fresh port).
	transport func(t testing.TB, cfg *Config, addr string)
	// crash makes a node vanish without leaving.
	crash   func(m *Membership)
	timeout time.Duration
}

func (e *testEnv) start(t testing.TB, id, label string, incarnation uint64, seeds ...string) *Membership {
	t.Helper()
	return e.startAt(t, "", id, label, incarnation, seeds...)
}

// startAt starts a node at addr ("" = a fresh address) and joins seeds.
func (e *testEnv) startAt(t testing.TB, addr, id, label string, incarnation uint64, seeds ...string) *Membership {
	t.Helper()
	return e.startMeta(t, addr, id, label, Meta{Incarnation: incarnation, Health: 1, Version: "test", RaftAddr: "127.0.0.1:1"}, seeds...)
}

// startClaiming starts a node that has not claimed its id yet
// (TagClaiming), at addr ("" = a fresh address).
func (e *testEnv) startClaiming(t testing.TB, addr, id string, incarnation uint64, seeds ...string) *Membership {
	t.Helper()
	return e.startMeta(t, addr, id, "tenure", Meta{Incarnation: incarnation, Health: 1, Version: "test", RaftAddr: "127.0.0.1:1",
		Tags: map[string]string{TagClaiming: "1"}}, seeds...)
}

func (e *testEnv) startMeta(t testing.TB, addr, id, label string, meta Meta, seeds ...string) *Membership {
	t.Helper()
	cfg := e.profile()
	cfg.Name = id
	cfg.ClusterLabel = label
	cfg.Logger = slog.New(e.logs.handler()).With("env", e.name)
	cfg.Seeds = seeds
	if e.transport != nil {
		e.transport(t, &cfg, addr)
	} else if addr != "" {
		_, port, _ := net.SplitHostPort(addr)
		cfg.BindPort, _ = strconv.Atoi(port)
	}
	m, err := NewMembership(cfg, meta)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	if len(seeds) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		defer cancel()
		if _, err := m.Join(ctx, seeds); err != nil {
			t.Fatalf("%s join %v: %v", id, seeds, err)
		}
	}
	return m
}

func slogFor(b *logBuffer) *slog.Logger { return slog.New(b.handler()) }
