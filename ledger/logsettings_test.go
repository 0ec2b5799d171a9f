package ledger

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// Two replicas built with different limits (MaxPayload, retention, the
// session window) apply the same log identically once LogSettings is
// committed: same results, same digest. Before it, each judges with its
// own Config — the divergence the command removes (this test fails if the
// FSM kept judging with its Config after LogSettings).
func TestLogSettingsSameOnEveryReplica(t *testing.T) {
	small := DefaultConfig()
	small.MaxPayload, small.JobRetention, small.MaxFinishedJobs, small.SessionWindow, small.MaxSessions = 100, time.Hour, 10, time.Minute, 8
	big := DefaultConfig()
	a, _ := newTestFSM(t, small)
	b, _ := newTestFSM(t, big)
	idx := uint64(0)
	both := func(c Command) (Result, Result) {
		t.Helper()
		idx++
		ra, rb := a.ApplyCommandAt(idx, c, int64(idx)), b.ApplyCommandAt(idx, c, int64(idx))
		return ra, rb
	}
	same := func(c Command) Result {
		t.Helper()
		ra, rb := both(c)
		if (ra.Err == nil) != (rb.Err == nil) || (ra.Err != nil && ra.Err.Error() != rb.Err.Error()) {
			t.Fatalf("%T: replicas disagree: %v vs %v", c, ra.Err, rb.Err)
		}
		return ra
	}
	payload := bytes.Repeat([]byte("x"), 500)
	enqueue := func(key string, p []byte) JobEnqueue {
		return JobEnqueue{Shard: 0, Key: key, Type: "t", Payload: p, Now: int64(idx)}
	}

	same(Heartbeat{Node: "n1", Incarnation: 1, MinVersion: 1, MaxVersion: MaxClusterVersion})
	same(ClusterConfig{Name: "c", Partitions: 4, Version: VersionLogSettings})
	// Before LogSettings each replica's own MaxPayload decides (an App
	// for no owned shard is refused by both, after the size check).
	if ra, rb := both(App{Shard: 0, Epoch: 1, Type: "counter", Payload: payload}); !errors.Is(ra.Err, ErrTooLarge) || errors.Is(rb.Err, ErrTooLarge) {
		t.Fatalf("before LogSettings: small %v, big %v; want each its own limit", ra.Err, rb.Err)
	}
	want := LogSettings{MaxPayload: 1000, JobRetention: int64(2 * time.Hour), MaxFinishedJobs: 50, DefaultMaxAttempts: 2,
		SessionWindow: int64(5 * time.Minute), MaxSessions: 100, Now: 3}
	if r := same(want); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, f := range []*FSM{a, b} {
		s := f.State().Settings()
		if !s.Logged || LogSettingsOf(s, want.Now) != want {
			t.Fatalf("settings after LogSettings: %+v", s)
		}
	}
	if r := same(enqueue("after", payload)); r.Err != nil || r.Job.MaxAttempts != 2 {
		t.Fatalf("500 bytes under the logged 1000: %+v", r)
	}
	if r := same(enqueue("huge", bytes.Repeat([]byte("x"), 1001))); !errors.Is(r.Err, ErrTooLarge) {
		t.Fatalf("1001 bytes over the logged 1000: %v", r.Err)
	}
	same(Session{ID: RequestID{1}, Command: enqueue("s", nil)})
	idx++
	for _, f := range []*FSM{a, b} {
		if err := f.RequestDigest(idx); err != nil {
			t.Fatal(err)
		}
	}
	idx--
	same(Heartbeat{Node: "n1", Incarnation: 1, Liveness: 1, MinVersion: 1, MaxVersion: MaxClusterVersion})
	da, _ := a.Digest(t.Context(), idx)
	db, _ := b.Digest(t.Context(), idx)
	if da != db {
		t.Fatalf("digests differ after LogSettings: %x vs %x", da, db)
	}

	// The logged values survive a snapshot into a replica with yet
	// another Config, which writes it as version 6.
	snap := snapshotBytes(t, a)
	if snap[0] != snapshotLogSettings {
		t.Fatalf("snapshot version %d with logged settings, want %d", snap[0], snapshotLogSettings)
	}
	c, _ := newTestFSM(t, DefaultConfig())
	restoreBytes(t, c, snap)
	if got := c.State().Settings(); got != a.State().Settings() {
		t.Fatalf("restored settings %+v, want %+v", got, a.State().Settings())
	}
}

// Before cluster version 4 LogSettings is refused everywhere alike and each
// replica keeps its own limits, as before; snapshots stay version 5 and a
// restore keeps the local limits.
func TestLogSettingsBeforeVersion4(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPayload = 100
	f, _ := newTestFSM(t, cfg)
	f.ApplyCommand(1, Heartbeat{Node: "n1", Incarnation: 1, MinVersion: 1, MaxVersion: MaxClusterVersion})
	f.ApplyCommand(2, ClusterConfig{Name: "c", Partitions: 4, Version: VersionLogSettings - 1})
	ls := LogSettingsOf(DefaultConfig().Settings(), 3)
	if r := f.ApplyCommand(3, ls); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("LogSettings at version %d: %v, want ErrVersion", VersionLogSettings-1, r.Err)
	}
	if s := f.State().Settings(); s.Logged || s.MaxPayload != 100 {
		t.Fatalf("settings %+v, want the local ones", s)
	}
	snap := snapshotBytes(t, f)
	if snap[0] != 5 {
		t.Fatalf("snapshot version %d before LogSettings, want 5", snap[0])
	}
	g, _ := newTestFSM(t, DefaultConfig())
	restoreBytes(t, g, snap)
	if s := g.State().Settings(); s.Logged || s.MaxPayload != DefaultMaxPayload || s.SessionWindow != int64(DefaultSessionWindow) {
		t.Fatalf("restored settings %+v, want the restoring replica's limits", s)
	}
}

func TestLogSettingsInvalid(t *testing.T) {
	f, _ := newTestFSM(t, DefaultConfig())
	f.ApplyCommand(1, ClusterConfig{Name: "c", Partitions: 4, Version: VersionLogSettings})
	good := LogSettingsOf(DefaultConfig().Settings(), 1)
	for i, mut := range []func(*LogSettings){
		func(c *LogSettings) { c.MaxPayload = 0 },
		func(c *LogSettings) { c.MaxPayload = MaxCommandSize },
		func(c *LogSettings) { c.JobRetention = -1 },
		func(c *LogSettings) { c.MaxFinishedJobs = 0 },
		func(c *LogSettings) { c.DefaultMaxAttempts = 0 },
		func(c *LogSettings) { c.SessionWindow = 0 },
		func(c *LogSettings) { c.MaxSessions = 0 },
	} {
		c := good
		mut(&c)
		if r := f.ApplyCommand(uint64(2+i), c); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("case %d %+v: %v, want ErrInvalid", i, c, r.Err)
		}
	}
	if f.State().Settings().Logged {
		t.Fatal("an invalid LogSettings was applied")
	}
	if r := f.ApplyCommand(20, good); r.Err != nil || !f.State().Settings().Logged {
		t.Fatalf("valid LogSettings: %v", r.Err)
	}
}

func TestLogSettingsOperatorOnly(t *testing.T) {
	f, _ := newTestFSM(t, DefaultConfig())
	st := f.State()
	c := LogSettingsOf(DefaultConfig().Settings(), 1)
	if err := Authorize(st, Proposer{ID: "n1"}, c); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "LogSettings") {
		t.Fatalf("member: %v", err)
	}
	if err := Authorize(st, Proposer{ID: "ops", Operator: true}, c); err != nil {
		t.Fatalf("operator: %v", err)
	}
}

func restoreBytes(t *testing.T, f *FSM, b []byte) {
	t.Helper()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
}
