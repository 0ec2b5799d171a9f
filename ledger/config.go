package ledger

import (
	"fmt"
	"time"
)

// Config configures an FSM. Until the cluster commits LogSettings (cluster
// version 4, VersionLogSettings) every replica of one ledger must use the
// same Config: the values take part in Apply (payload limits, the session
// window) or seed the replicated settings (which a Settings command changes
// afterwards). Once LogSettings is committed, the log's values replace all
// of them on every replica.
type Config struct {
	// MaxPayload bounds job payloads, job results and application command
	// payloads; Apply rejects larger ones with ErrTooLarge.
	MaxPayload int
	// JobRetention is how long a finished (completed or dead) job is kept,
	// measured with the proposers' clocks (command Now) from FinishedAt.
	JobRetention time.Duration
	// MaxFinishedJobs bounds how many finished jobs are kept; the oldest
	// finished are dropped first.
	MaxFinishedJobs int
	// DefaultMaxAttempts is the MaxAttempts of jobs enqueued with 0.
	DefaultMaxAttempts int
	// SessionWindow is how long the session table remembers a request id
	// (measured with the proposers' clocks, command Now); 0 means
	// DefaultSessionWindow. MaxSessions bounds how many it remembers; 0
	// means DefaultMaxSessions. The oldest go first (docs/ledger.md).
	SessionWindow time.Duration
	MaxSessions   int
}

// Defaults.
const (
	DefaultMaxPayload         = 1 << 20
	DefaultJobRetention       = 24 * time.Hour
	DefaultMaxFinishedJobs    = 100_000
	DefaultDefaultMaxAttempts = 5
	DefaultSessionWindow      = 10 * time.Minute
	DefaultMaxSessions        = 65_536
)

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		MaxPayload:         DefaultMaxPayload,
		JobRetention:       DefaultJobRetention,
		MaxFinishedJobs:    DefaultMaxFinishedJobs,
		DefaultMaxAttempts: DefaultDefaultMaxAttempts,
		SessionWindow:      DefaultSessionWindow,
		MaxSessions:        DefaultMaxSessions,
	}
}

// Validate reports the first invalid value.
func (c Config) Validate() error {
	switch {
	case c.MaxPayload <= 0 || c.MaxPayload > MaxCommandSize/2:
		return fmt.Errorf("ledger: MaxPayload %d must be in (0, %d]", c.MaxPayload, MaxCommandSize/2)
	case c.JobRetention <= 0:
		return fmt.Errorf("ledger: JobRetention %v must be positive", c.JobRetention)
	case c.MaxFinishedJobs <= 0 || c.MaxFinishedJobs > 1<<32-1:
		return fmt.Errorf("ledger: MaxFinishedJobs %d must be in (0, %d]", c.MaxFinishedJobs, uint32(1<<32-1))
	case c.DefaultMaxAttempts <= 0 || c.DefaultMaxAttempts > 1<<32-1:
		return fmt.Errorf("ledger: DefaultMaxAttempts %d must be in (0, %d]", c.DefaultMaxAttempts, uint32(1<<32-1))
	case c.SessionWindow < 0:
		return fmt.Errorf("ledger: SessionWindow %v must not be negative", c.SessionWindow)
	case c.MaxSessions < 0 || c.MaxSessions > 1<<32-1:
		return fmt.Errorf("ledger: MaxSessions %d must be in [0, %d]", c.MaxSessions, uint32(1<<32-1))
	}
	return nil
}

func (c Config) sessionWindow() int64 {
	if c.SessionWindow == 0 {
		return int64(DefaultSessionWindow)
	}
	return int64(c.SessionWindow)
}

func (c Config) maxSessions() int {
	if c.MaxSessions == 0 {
		return DefaultMaxSessions
	}
	return c.MaxSessions
}

// Settings are the settings a replica with this Config starts with (and
// applies with until LogSettings is committed).
func (c Config) Settings() LedgerSettings {
	return LedgerSettings{
		JobRetention:       int64(c.JobRetention),
		MaxFinishedJobs:    uint32(c.MaxFinishedJobs),
		DefaultMaxAttempts: uint32(c.DefaultMaxAttempts),
		MaxPayload:         uint32(c.MaxPayload),
		SessionWindow:      c.sessionWindow(),
		MaxSessions:        uint32(c.maxSessions()),
	}
}
