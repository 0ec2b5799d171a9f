package bench

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"
)

// Issue 16, "stopping and starting a whole cluster cleanly": SIGTERM to
// every agent of a running cluster at once (docker compose down, a fleet
// shutdown) ends every process with exit status 0 within a few seconds —
// drain gives up when nobody can take the shards, leave does not fail
// when nobody is left to hear it — and the cluster started again from the
// voters' data dirs (members disk-less) comes back with the same voters
// and every shard owned.
func TestRealClusterStopAllAndStartAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	bin := tenureBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	o := realScaleOptions{nodes: 5, voters: 3, shards: 32, profile: "fast", idle: time.Second, settle: 90 * time.Second}
	c := &realCluster{bin: bin, dir: t.TempDir(), o: o, client: http.Client{Timeout: 5 * time.Second}, log: t.Logf}
	defer c.stopAll()
	if err := c.layout(); err != nil {
		t.Fatal(err)
	}
	start := func(round string) {
		t.Helper()
		if err := c.spawnAll(); err != nil {
			t.Fatal(err)
		}
		if err := c.waitConverged(ctx, o.settle); err != nil {
			t.Fatalf("%s: %v", round, err)
		}
	}
	voters := func() []string {
		t.Helper()
		var st struct {
			Voters []string `json:"voters"`
		}
		if err := c.get(ctx, c.firstVoter(), "/v1/status", &st); err != nil {
			t.Fatal(err)
		}
		slices.Sort(st.Voters)
		return st.Voters
	}
	want := []string{"voter-0", "voter-1", "voter-2"}

	start("first start")
	if got := voters(); !slices.Equal(got, want) {
		t.Fatalf("voters after the first start: %v, want %v", got, want)
	}
	// Every agent at once. The agents' drain timeout is 2 s (c.args); the
	// bound leaves room for leave and a loaded machine, and is well under
	// the 30 s a whole-cluster stop used to take.
	const bound = 10 * time.Second
	took, unclean := stopAgents(c.agents, stopGrace)
	if len(unclean) > 0 {
		t.Errorf("after SIGTERM to every agent, not exiting 0 by themselves: %v (logs in %s)", unclean, c.dir)
	}
	if took > bound {
		t.Errorf("the last agent exited %v after SIGTERM to all, want within %v (logs in %s)", took, bound, c.dir)
	}
	t.Logf("every agent exited %v after SIGTERM to all", took.Round(time.Millisecond))
	if t.Failed() {
		t.FailNow()
	}

	start("start again")
	if got := voters(); !slices.Equal(got, want) {
		t.Fatalf("voters after starting again: %v, want %v (a voter stopped gracefully must come back a voter)", got, want)
	}
}
