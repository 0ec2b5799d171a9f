package ledger

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/mutation"
)

// VersionLogSettings is the cluster version from which the values every
// replica applies entries with — MaxPayload, job retention and its limits,
// the session window and size — come from the log (LogSettings) instead of
// each replica's own Config, so two binaries built with other defaults
// apply the same entry the same way. Before a LogSettings is committed (and
// before the version is active) each replica uses its Config, as before.
const VersionLogSettings uint32 = 4

// KindLogSettings is the wire kind of LogSettings (encoding version 6).
const KindLogSettings Kind = 23

// encodingLogSettings and snapshotLogSettings are the encoding and snapshot
// versions that carry LogSettings and the logged values.
const (
	encodingLogSettings byte = 6
	snapshotLogSettings byte = 6
)

// LogSettings records in the log every value Apply judges with: from the
// entry on, all replicas use these (LedgerSettings.Logged) whatever their
// Config says. Every field is required (the proposer resolves defaults). The
// control-group leader proposes one, with the values its replica applies
// with (State.Settings), once the cluster runs VersionLogSettings and none
// is committed; an operator may propose another to change them. The Settings
// command still changes the job fields afterwards.
type LogSettings struct {
	MaxPayload         uint32 // bytes: job payloads, job results, App payloads
	JobRetention       int64  // ns a finished job is kept after it finished
	MaxFinishedJobs    uint32 // at most this many finished jobs are kept
	DefaultMaxAttempts uint32 // MaxAttempts for jobs enqueued with 0
	SessionWindow      int64  // ns a request id is remembered
	MaxSessions        uint32 // at most this many request ids are remembered
	Now                int64
}

func (LogSettings) kind() Kind { return KindLogSettings }

func init() {
	register(kindSpec[LogSettings]{
		kind: KindLogSettings, name: "LogSettings", since: encodingLogSettings,
		fields: func(cd codec, c LogSettings) LogSettings {
			cd.walk(&c.MaxPayload, &c.JobRetention, &c.MaxFinishedJobs, &c.DefaultMaxAttempts,
				&c.SessionWindow, &c.MaxSessions, &c.Now)
			return c
		},
		apply:      thenPrune((*FSM).logSettings, func(c LogSettings) int64 { return c.Now }),
		who:        whoOperator,
		authorize:  operatorOnly[LogSettings],
		sessionNow: func(c LogSettings) int64 { return c.Now },
	})
}

// LogSettingsOf is the command that commits s, the settings a replica
// applies with, at now (unix ns).
func LogSettingsOf(s LedgerSettings, now int64) LogSettings {
	return LogSettings{MaxPayload: s.MaxPayload, JobRetention: s.JobRetention, MaxFinishedJobs: s.MaxFinishedJobs,
		DefaultMaxAttempts: s.DefaultMaxAttempts, SessionWindow: s.SessionWindow, MaxSessions: s.MaxSessions, Now: now}
}

// Validate checks c with Config's bounds (the one place they live), and
// demands the values Config would default. The FSM refuses an invalid one
// with ErrInvalid.
func (c LogSettings) Validate() error {
	if c.SessionWindow <= 0 || c.MaxSessions == 0 {
		return fmt.Errorf("session window %d ns and max sessions %d must be positive", c.SessionWindow, c.MaxSessions)
	}
	return Config{MaxPayload: int(c.MaxPayload), JobRetention: time.Duration(c.JobRetention), MaxFinishedJobs: int(c.MaxFinishedJobs),
		DefaultMaxAttempts: int(c.DefaultMaxAttempts), SessionWindow: time.Duration(c.SessionWindow), MaxSessions: int(c.MaxSessions)}.Validate()
}

func (f *FSM) logSettings(c LogSettings) Result {
	if !f.st.VersionActive(VersionLogSettings) && !mutation.On(mutation.GatedWhileMixed) {
		return Result{Err: errf(ErrVersion, "logged settings need cluster version %d; the cluster runs %d",
			VersionLogSettings, f.st.ActiveVersion())}
	}
	if err := c.Validate(); err != nil {
		return Result{Err: errf(ErrInvalid, "log settings: %v", err)}
	}
	f.st.settings = LedgerSettings{JobRetention: c.JobRetention, MaxFinishedJobs: c.MaxFinishedJobs, DefaultMaxAttempts: c.DefaultMaxAttempts,
		MaxPayload: c.MaxPayload, SessionWindow: c.SessionWindow, MaxSessions: c.MaxSessions, Logged: true}
	return Result{}
}

// localLimits fills the limits a snapshot without logged settings does not
// carry from this replica's Config (as before VersionLogSettings).
func (s LedgerSettings) localLimits(c Config) LedgerSettings {
	if !s.Logged {
		l := c.Settings()
		s.MaxPayload, s.SessionWindow, s.MaxSessions = l.MaxPayload, l.SessionWindow, l.MaxSessions
	}
	return s
}

// writeSnapshotSettings and readSnapshotSettings carry the logged values
// in snapshots of version snapshotLogSettings (after the version-5 fields).
func writeSnapshotSettings(w *writer, s LedgerSettings) {
	w.bool(s.Logged)
	if s.Logged {
		w.u(uint64(s.MaxPayload))
		w.i(s.SessionWindow)
		w.u(uint64(s.MaxSessions))
	}
}

func readSnapshotSettings(r *reader, s *LedgerSettings) {
	if s.Logged = r.bool(); s.Logged {
		s.MaxPayload, s.SessionWindow, s.MaxSessions = r.u32(), r.i(), r.u32()
	}
}
