package gossip

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestRejoinDelay(t *testing.T) {
	const interval = 30 * time.Second
	for _, c := range []struct {
		alone   bool
		attempt int
		want    time.Duration
	}{
		{false, 0, interval},
		{false, 7, interval},
		{true, 0, 250 * time.Millisecond},
		{true, 1, 500 * time.Millisecond},
		{true, 3, 2 * time.Second},
		{true, 6, 16 * time.Second},
		{true, 7, interval},
		{true, 1000, interval},
	} {
		if got := rejoinDelay(c.alone, c.attempt, interval); got != c.want {
			t.Errorf("rejoinDelay(alone %v, attempt %d, %v) = %v, want %v", c.alone, c.attempt, interval, got, c.want)
		}
	}
	if got := rejoinDelay(true, 0, 100*time.Millisecond); got != 100*time.Millisecond {
		t.Errorf("a RejoinInterval below firstRejoinDelay: got %v", got)
	}
}

// A node whose seed is not listening yet when it starts (a fleet started
// at once) joins it soon after the seed comes up, not a whole
// RejoinInterval (30 s in the LAN profile) later.
func TestRejoinWhileAloneIsQuick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEnv(t)
		base := e.profile
		e.profile = func() Config { c := base(); c.RejoinInterval = 30 * time.Second; return c }
		const seedAddr = "10.9.0.1:7946"
		late := e.start(t, "late", "tenure", 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := late.Join(ctx, []string{seedAddr}); err == nil {
			t.Fatal("join of a seed that is not up succeeded")
		}
		time.Sleep(time.Second)
		seed := e.startAt(t, seedAddr, "seed", "tenure", 1)
		start := time.Now()
		waitUntil(t, 5*time.Second, "late and seed to see each other", func() bool {
			return aliveIDs(late) == "late,seed" && aliveIDs(seed) == "late,seed"
		})
		t.Logf("joined %v after the seed came up (RejoinInterval 30s)", time.Since(start))
	})
}
