package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// `tenure bench failover --fenced`: every partition under fenced takeover
// (docs/guarantees.md: S4 waived), so a killed owner's shards move as soon
// as the leader has not heard from it for FencedAfter, not after its lease.

func fencedFlags(fs *flag.FlagSet, o *failoverOptions) {
	fs.BoolVar(&o.fenced, "fenced", false, "put every shard under fenced takeover (S4 waived: the successor does not wait out the dead owner's lease); crash mode only")
	fs.DurationVar(&o.fencedAfter, "fenced-after", 0, "with --fenced: the agents' --fenced-after (0: 3 heartbeat periods of the profile)")
}

func (o failoverOptions) checkFenced() error {
	switch {
	case o.fencedAfter < 0:
		return fmt.Errorf("bench failover: -fenced-after %v: want ≥ 0", o.fencedAfter)
	case o.fencedAfter > 0 && !o.fenced:
		return errors.New("bench failover: -fenced-after needs -fenced")
	case o.fenced && o.mode != "crash":
		return fmt.Errorf("bench failover: -fenced with -mode %s: fenced takeover is measured on crashes", o.mode)
	}
	return nil
}

func (o failoverOptions) fencedNote() string {
	switch {
	case !o.fenced:
		return ""
	case o.fencedAfter > 0:
		return fmt.Sprintf(", fenced takeover after %v", o.fencedAfter)
	}
	return ", fenced takeover"
}

// setFenced commits the policy for every partition through the first
// agent, retrying while the cluster has not finalized version 4 yet (409).
func (c *foCluster) setFenced(ctx context.Context) error {
	if !c.opts.fenced {
		return nil
	}
	body, err := json.Marshal(apitypes.FencedRequest{First: 0, Last: uint32(c.opts.partitions - 1), Fenced: true})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.postJSON(ctx, c.agents[0], "/v1/fenced", body)
		if err == nil {
			c.log("every shard under fenced takeover")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench failover: fenced takeover: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *foCluster) postJSON(ctx context.Context, a *foAgent, path string, body []byte) error {
	return agentPost(ctx, &c.client, a, path, body)
}

// splitEarly returns the samples ≥ 0 and how many were negative: a
// successor that acted before the kill took over from a live owner (a
// fenced takeover on a false suspicion), which is no failover time.
func splitEarly(samples []float64) ([]float64, int) {
	kept := make([]float64, 0, len(samples))
	for _, v := range samples {
		if v >= 0 {
			kept = append(kept, v)
		}
	}
	return kept, len(samples) - len(kept)
}
