package logadapt

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func jsonLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	b.Reset()
	return out
}

// Raft's records keep their level, carry no level tag or timestamp in the
// message, and one dead peer's repeated errors are rate-limited.
func TestRaftLoggerLevelsAndLimit(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hl := newRaftLogger(l).(*slogHCLog)
	now := time.Unix(1000, 0)
	hl.limit.now = func() time.Time { return now }
	hl.SetLevel(hclog.Trace)

	hl.Error("failed to appendEntries to", "peer", "n3", "error", errors.New("dial tcp: refused"))
	hl.Warn("heartbeat timeout reached", "last-leader-addr", "x")
	hl.Info("entering follower state", "follower", "n1")
	hl.Named("net").Debug("accepted connection")
	got := jsonLines(t, &buf)
	if len(got) != 4 {
		t.Fatalf("%d records: %v", len(got), got)
	}
	for i, want := range []struct{ level, msg string }{
		{"ERROR", "raft: failed to appendEntries to"}, {"WARN", "raft: heartbeat timeout reached"},
		{"INFO", "raft: entering follower state"}, {"DEBUG", "raft.net: accepted connection"},
	} {
		if got[i]["level"] != want.level || got[i]["msg"] != want.msg {
			t.Errorf("record %d: %v, want %s %q", i, got[i], want.level, want.msg)
		}
	}
	if got[0]["peer"] != "n3" || got[0]["error"] != "dial tcp: refused" {
		t.Errorf("attributes: %v", got[0])
	}

	// Every heartbeat for a lease: one line per peer.
	for range 30 {
		now = now.Add(330 * time.Millisecond)
		hl.Error("failed to appendEntries to", "peer", "n3", "error", "refused")
		hl.Warn("failed to contact", "server-id", "n3", "time", "1s")
		hl.Error("failed to appendEntries to", "peer", "n4", "error", "refused")
	}
	// 30×330ms = 9.9s after the first n3 error: n3's appendEntries stays
	// quiet; n3's "failed to contact" and n4's error are logged once.
	got = jsonLines(t, &buf)
	if len(got) != 2 || got[0]["server-id"] != "n3" || got[1]["peer"] != "n4" {
		t.Fatalf("records after 30 heartbeats: %v", got)
	}
	now = now.Add(raftLogEvery)
	hl.Error("failed to appendEntries to", "peer", "n3", "error", "refused")
	got = jsonLines(t, &buf)
	if len(got) != 1 || got[0]["suppressed"] != float64(30) {
		t.Fatalf("after the interval: %v", got)
	}
	hl.SetLevel(hclog.Error)
	hl.Warn("quiet")
	if buf.Len() != 0 || hl.IsWarn() || !hl.IsError() {
		t.Fatalf("SetLevel(Error): %q", buf.String())
	}
}

func TestLogWriterStripsTimestampsAndLimits(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	now := time.Unix(1000, 0)
	w := &logWriter{log: l, limit: &peerLimiter{every: 10 * time.Second, now: func() time.Time { return now }}}
	for _, line := range []string{
		"2026/11/25 11:56:25 [ERR] memberlist: Failed to send ping: refused\n",
		"2026-11-25T11:56:25.123Z [ERROR] raft: failed\n",
		"[WARN] memberlist: Was able to connect to n3\n",
		"[WARN] memberlist: Was able to connect to n3\n",
		"[INFO] memberlist: Suspect n3 has failed\n",
	} {
		_, _ = w.Write([]byte(line))
	}
	got := jsonLines(t, &buf)
	want := []struct{ level, msg string }{
		{"ERROR", "memberlist: Failed to send ping: refused"}, {"ERROR", "raft: failed"},
		{"WARN", "memberlist: Was able to connect to n3"}, {"INFO", "memberlist: Suspect n3 has failed"},
	}
	if len(got) != len(want) {
		t.Fatalf("records: %v", got)
	}
	for i, w := range want {
		if got[i]["level"] != w.level || got[i]["msg"] != w.msg {
			t.Errorf("record %d: %v, want %s %q", i, got[i], w.level, w.msg)
		}
	}
}
