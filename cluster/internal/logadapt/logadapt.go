// Package logadapt turns the logs of cluster's libraries into slog records:
// hashicorp/raft's hclog.Logger and memberlist's log.Logger lines. Both keep
// their level, lose the timestamp they carry (slog adds its own), and one
// peer's repeated complaints are logged at most once per raftLogEvery with
// how many were held back.
package logadapt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// This file is an hclog.Logger (what hashicorp/raft logs to) backed by
// slog: raft's records keep their level (no "[ERROR]" inside a WARN line)
// and their key/value pairs, and carry no timestamp of their own. The
// repeated complaints about one unreachable peer — "failed to
// appendEntries to", "failed to heartbeat to", "failed to contact", every
// heartbeat — are logged at most once per peer per raftLogEvery, with how
// many were suppressed.

// raftLogEvery is how often one message about one peer is logged.
const raftLogEvery = 10 * time.Second

// NewRaftLogger returns the hclog.Logger raft and its transport log to.
func NewRaftLogger(l *slog.Logger) hclog.Logger { return newRaftLogger(l) }

func newRaftLogger(l *slog.Logger) hclog.Logger {
	lv := new(atomic.Int32)
	lv.Store(int32(hclog.Info))
	return &slogHCLog{log: l, name: "raft", level: lv, limit: &peerLimiter{every: raftLogEvery, now: time.Now}}
}

type slogHCLog struct {
	log     *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // an hclog.Level, shared by With and Named
	limit   *peerLimiter
}

var _ hclog.Logger = (*slogHCLog)(nil)

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *slogHCLog) enabled(l hclog.Level) bool {
	if l == hclog.NoLevel {
		l = hclog.Info
	}
	min := hclog.Level(h.level.Load())
	return min != hclog.Off && l >= min && h.log.Enabled(context.Background(), slogLevel(l))
}

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || !h.enabled(level) {
		return
	}
	all := append(append([]any(nil), h.implied...), args...)
	if level >= hclog.Warn {
		if peer, ok := peerArg(all); ok {
			emit, suppressed := h.limit.allow(msg + "\x00" + peer)
			if !emit {
				return
			}
			if suppressed > 0 {
				all = append(all, "suppressed", suppressed)
			}
		}
	}
	for i, a := range all {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 { // hclog.Fmt("%d", n)
			if s, ok := f[0].(string); ok {
				all[i] = fmt.Sprintf(s, f[1:]...)
			}
		}
	}
	if h.name != "" {
		msg = h.name + ": " + msg
	}
	h.log.Log(context.Background(), slogLevel(level), msg, all...)
}

// peerArg is the value of a record's peer-naming key.
func peerArg(args []any) (string, bool) {
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "peer", "server-id", "id", "target":
			return fmt.Sprint(args[i+1]), true
		}
	}
	return "", false
}

func (h *slogHCLog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *slogHCLog) IsTrace() bool                 { return h.enabled(hclog.Trace) }
func (h *slogHCLog) IsDebug() bool                 { return h.enabled(hclog.Debug) }
func (h *slogHCLog) IsInfo() bool                  { return h.enabled(hclog.Info) }
func (h *slogHCLog) IsWarn() bool                  { return h.enabled(hclog.Warn) }
func (h *slogHCLog) IsError() bool                 { return h.enabled(hclog.Error) }
func (h *slogHCLog) ImpliedArgs() []any            { return append([]any(nil), h.implied...) }
func (h *slogHCLog) Name() string                  { return h.name }
func (h *slogHCLog) SetLevel(l hclog.Level)        { h.level.Store(int32(l)) }
func (h *slogHCLog) GetLevel() hclog.Level         { return hclog.Level(h.level.Load()) }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(append([]any(nil), h.implied...), args...)
	return &c
}

func (h *slogHCLog) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

// StandardWriter parses "[LEVEL] msg" lines like memberlist's.
func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &logWriter{log: h.log}
}

// peerLimiter lets one message per key through every `every`, counting
// the ones it holds back.
type peerLimiter struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	seen  map[string]*limitEntry
}

type limitEntry struct {
	last       time.Time
	suppressed int
}

// allow reports whether a record of key is logged now, and how many were
// held back since the last one that was.
func (p *peerLimiter) allow(key string) (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.seen == nil {
		p.seen = map[string]*limitEntry{}
	}
	e, ok := p.seen[key]
	if !ok {
		if len(p.seen) > 1024 { // peers come and go: forget the old ones
			for k, old := range p.seen {
				if now.Sub(old.last) > p.every {
					delete(p.seen, k)
				}
			}
		}
		p.seen[key] = &limitEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < p.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// NewMemberlistWriter returns the writer memberlist's log.Logger writes to:
// its lines go to l at their level, a repeated WARN or ERROR line at most
// once per raftLogEvery.
func NewMemberlistWriter(l *slog.Logger) io.Writer {
	return &logWriter{log: l, limit: &peerLimiter{every: raftLogEvery, now: time.Now}}
}

// logWriter forwards memberlist's "[LEVEL] memberlist: msg" lines to slog
// at the matching level, without a timestamp a line carries (slog adds
// its own). With a limit, a WARN or ERROR line repeated word for word (the
// same failing peer every probe) is logged at most once per limit.every.
type logWriter struct {
	log   *slog.Logger
	limit *peerLimiter
}

// logStamp matches the timestamp a log.Logger or hclog line starts with.
var logStamp = regexp.MustCompile(`^(\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?) `)

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	line = logStamp.ReplaceAllString(line, "")
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{
		"[DEBUG] ": slog.LevelDebug, "[INFO] ": slog.LevelInfo,
		"[WARN] ": slog.LevelWarn, "[ERR] ": slog.LevelError, "[ERROR] ": slog.LevelError,
	} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			line, level = rest, l
			break
		}
	}
	var attrs []any
	if w.limit != nil && level >= slog.LevelWarn {
		emit, suppressed := w.limit.allow(line)
		if !emit {
			return len(p), nil
		}
		if suppressed > 0 {
			attrs = append(attrs, "suppressed", suppressed)
		}
	}
	w.log.Log(context.Background(), level, line, attrs...)
	return len(p), nil
}
