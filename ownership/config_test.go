package ownership

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProfilesValidate(t *testing.T) {
	for name, c := range map[string]Config{"fast": FastConfig(), "default": DefaultConfig(), "safe": SafeConfig(), "test": TestConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateNamesBadValues(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Lease = 0 }, "Lease = 0s"},
		{func(c *Config) { c.RenewEvery = c.Lease / 2 }, "RenewEvery = 1s"},
		{func(c *Config) { c.MaxDrift = 0.5 }, "MaxDrift = 0.5"},
		{func(c *Config) { c.MaxDrift = -0.1 }, "MaxDrift = -0.1"},
		{func(c *Config) { c.DrainTimeout = -time.Second }, "DrainTimeout = -1s"},
		{func(c *Config) { c.MaxMovesInFlight = 0 }, "MaxMovesInFlight = 0"},
		{func(c *Config) { c.MinHealth = 2 }, "MinHealth = 2"},
		{func(c *Config) { c.MaxDrift, c.RenewEvery = 0.45, 900*time.Millisecond }, "Lease·(1−MaxDrift)/2"},
		{func(c *Config) { c.FencedAfter = -time.Millisecond }, "FencedAfter = -1ms"},
		{func(c *Config) { c.FencedAfter = c.RenewEvery }, "want > RenewEvery"},
		{func(c *Config) { c.FencedAfter = c.Lease * 2 }, "want < Lease·(1+MaxDrift)"},
		{func(c *Config) { c.Ring.Partitions = 0 }, "Ring"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want ErrInvalidConfig naming %q", err, tc.want)
		}
		if _, err := NewPlanner(c); err == nil {
			t.Errorf("NewPlanner accepted an invalid config (%s)", tc.want)
		}
	}
}
