package node

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/ownership"
	"github.com/tenurehq/tenure/ring"
)

// Load reports (docs/ring.md, load-aware placement). The application
// reports a load per shard it owns; the node gossips a summary — its total
// and its hottest shards — in the "tenure.load" tag (gossip metadata is
// limited to 512 bytes, so not every shard's load), and the control-group
// leader swaps shards off a node that carries well over its share.

// loadTag carries the load summary: "total;shard:load,shard:load,...".
const loadTag = "tenure.load"

// loadHotShards is how many of its hottest shards a node gossips.
const loadHotShards = 3

// loadTagMax bounds the tag's value (3 entries need under 80 bytes).
const loadTagMax = 128

// LoadSummary is what a node gossips of its load: its total and its
// hottest shards, hottest first, at most 3 (ownership.LoadReport, the one
// type the planner reads).
type LoadSummary = ownership.LoadReport

// ReportLoad records the current load of shard, one of this node's
// shards: any non-negative number in a unit every node of the cluster
// uses (requests/s, queue depth, CPU share). The node gossips a summary
// of the loads of the shards it owns, once per heartbeat period when it
// changed; a shard it no longer owns drops out of it. Report 0 (or stop
// reporting on every node) to leave placement by count alone. The leader
// balances load only while every placement member reports some load.
// Errors: ErrInvalid for a NaN, infinite or negative value or a shard out
// of range; ErrClosed.
func (n *Node) ReportLoad(shard uint32, value float64) error {
	if n.isClosed() {
		return ErrClosed
	}
	if math.IsNaN(value) || math.IsInf(value, 0) || value < 0 {
		return fmt.Errorf("%w: load %v of shard %d: want a finite value ≥ 0", ErrInvalid, value, shard)
	}
	if int64(shard) >= int64(n.cfg.Partitions) {
		return fmt.Errorf("%w: load of shard %d: partitions are 0..%d", ErrInvalid, shard, n.cfg.Partitions-1)
	}
	n.loadMu.Lock()
	if n.loads == nil {
		n.loads = make(map[uint32]float64)
	}
	n.loads[shard] = value
	n.loadMu.Unlock()
	n.notify()
	return nil
}

// Loads returns the reported loads of the shards this node owns, sorted
// by load, highest first (ties: shard).
func (n *Node) Loads() []ring.ShardLoad {
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	return n.ownedLoadsLocked()
}

func (n *Node) ownedLoadsLocked() []ring.ShardLoad {
	out := make([]ring.ShardLoad, 0, len(n.loads))
	n.mu.Lock()
	for s, v := range n.loads {
		if n.view[s].owner == n.cfg.NodeID {
			out = append(out, ring.ShardLoad{Shard: s, Load: v})
		}
	}
	n.mu.Unlock()
	slices.SortFunc(out, func(a, b ring.ShardLoad) int {
		return cmp.Or(cmp.Compare(b.Load, a.Load), cmp.Compare(a.Shard, b.Shard))
	})
	return out
}

// publishLoad gossips the load summary if it changed. Called from the
// node's loop (after refresh); a node that never reported a load gossips
// nothing.
func (n *Node) publishLoad() {
	n.loadMu.Lock()
	if n.loads == nil {
		n.loadMu.Unlock()
		return
	}
	tag := formatLoad(n.ownedLoadsLocked())
	same := tag == n.loadGossiped
	n.loadMu.Unlock()
	if same {
		return
	}
	if err := n.be.setLoad(tag); err != nil {
		// Logged once per summary: it is not retried until it changes
		// (e.g. the gossip record is full: Tags leave no room for it).
		n.cfg.Logger.Warn("gossiping the load summary failed", "err", err)
	}
	n.loadMu.Lock()
	n.loadGossiped = tag
	n.loadMu.Unlock()
}

// formatLoad encodes the summary of loads (hottest first): the total and
// the loadHotShards hottest, 3 significant digits each, so small changes
// do not churn gossip.
func formatLoad(loads []ring.ShardLoad) string {
	total := 0.0
	for _, l := range loads {
		total += l.Load
	}
	var b strings.Builder
	b.WriteString(strconv.FormatFloat(total, 'g', 3, 64))
	b.WriteByte(';')
	for i, l := range loads[:min(len(loads), loadHotShards)] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(l.Shard), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatFloat(l.Load, 'g', 3, 64))
	}
	return b.String()
}

// parseLoad decodes a peer's load tag (outside input): nil when absent or
// malformed, never a panic. At most loadHotShards·2 entries are read.
func parseLoad(tag string) *ownership.LoadReport {
	if tag == "" || len(tag) > loadTagMax {
		return nil
	}
	totalStr, hotStr, ok := strings.Cut(tag, ";")
	if !ok {
		return nil
	}
	total, err := strconv.ParseFloat(totalStr, 64)
	if err != nil || math.IsNaN(total) || math.IsInf(total, 0) || total < 0 {
		return nil
	}
	lr := &ownership.LoadReport{Total: total}
	if hotStr == "" {
		return lr
	}
	parts := strings.Split(hotStr, ",")
	if len(parts) > 2*loadHotShards {
		return nil
	}
	for _, p := range parts {
		s, v, ok := strings.Cut(p, ":")
		shard, err1 := strconv.ParseUint(s, 10, 32)
		val, err2 := strconv.ParseFloat(v, 64)
		if !ok || err1 != nil || err2 != nil || math.IsNaN(val) || math.IsInf(val, 0) || val < 0 {
			return nil
		}
		lr.Hot = append(lr.Hot, ring.ShardLoad{Shard: uint32(shard), Load: val})
	}
	return lr
}
