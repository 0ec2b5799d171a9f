// Package s4check is the demo workload's safety witness in one place: the
// tick agents POST to --witness, how a POST body is read, and the S4 check
// over one shard's ticks. `tenure witness`, `tenure demo` and
// `tenure bench failover` all use it.
package s4check

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// MaxBody bounds one POST of ticks.
const MaxBody = 64 << 20

// Tick is one unit of demo work on a shard, as the witness receives it.
type Tick struct {
	Shard    uint32 `json:"shard"`
	Epoch    uint64 `json:"epoch"`
	Node     string `json:"node"`
	Seq      uint64 `json:"seq"`
	UnixNano int64  `json:"unix_nano"`
}

// DecodeBatch reads a POST body: a JSON array of ticks, or a single tick.
// The error of a body that is neither says what was wanted.
func DecodeBatch(body []byte) ([]Tick, error) {
	var batch []Tick
	err := json.Unmarshal(body, &batch)
	if err == nil {
		return batch, nil
	}
	var one Tick
	if json.Unmarshal(body, &one) != nil {
		return nil, errors.New("want a JSON array of ticks: " + err.Error())
	}
	return []Tick{one}, nil
}

// SortByTime orders ticks by time, equal times by epoch; it is stable.
func SortByTime(ts []Tick) {
	slices.SortStableFunc(ts, func(a, b Tick) int {
		return cmp.Or(cmp.Compare(a.UnixNano, b.UnixNano), cmp.Compare(a.Epoch, b.Epoch))
	})
}

// Violation is a tick that breaks S4 on its shard: Tick went back to a
// lower epoch than Top (the tick with the highest epoch before it), or Tick
// and Top are two nodes acting at one epoch.
type Violation struct {
	Tick, Top Tick
}

func (v Violation) String() string {
	t, top := v.Tick, v.Top
	if t.Epoch < top.Epoch {
		return fmt.Sprintf("shard %d: %s acted at epoch %d at %s, after %s acted at epoch %d at %s",
			t.Shard, t.Node, t.Epoch, stamp(t.UnixNano), top.Node, top.Epoch, stamp(top.UnixNano))
	}
	return fmt.Sprintf("shard %d: %s and %s both acted at epoch %d (%s, %s)",
		t.Shard, top.Node, t.Node, t.Epoch, stamp(top.UnixNano), stamp(t.UnixNano))
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000000") }

// Check walks one shard's ticks, sorted by time (SortByTime), and calls
// report for every tick that breaks S4: ordered by time, a shard's epoch
// never goes back, and one epoch belongs to one node. It stops early when
// report returns false.
func Check(ts []Tick, report func(Violation) bool) {
	var top Tick // the tick with the highest epoch so far
	for i, t := range ts {
		switch {
		case i == 0 || t.Epoch > top.Epoch:
			top = t
			continue
		case t.Epoch < top.Epoch, t.Node != top.Node:
			if !report(Violation{Tick: t, Top: top}) {
				return
			}
		}
	}
}
