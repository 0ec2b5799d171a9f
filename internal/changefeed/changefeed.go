// Package changefeed is the bounded list of changes that both change feeds
// keep: the ledger's (ledger.State.ShardChangesSince: which shards each
// published state changed) and node's (node.Node.ShardsSince: which shards
// each move of ShardsGeneration re-read). Each feed decides what a change
// names; this package only chains the changes, bounds the chain and answers
// "what changed since generation g".
package changefeed

import "slices"

// Link is the change from generation From to generation Gen: the ids it
// was about, or all of them. A link is immutable and points to the link
// before it, so holders of different links of one chain (the ledger's
// published states) share it, and any link answers Since for every
// generation its chain still holds.
type Link struct {
	gen, from uint64
	ids       []uint32 // sorted, distinct; nil when all
	all       bool     // any id may have changed
	prev      *Link
	held      int // ids in this link and the ones before it
	links     int // links in the chain from this one back
}

// Limits bound a chain: rather than hold more than IDs ids or Links links,
// Append starts a new chain (a reader further behind re-reads everything).
type Limits struct{ IDs, Links int }

// Append returns the link of the change from generation from to gen after
// prev (nil: none). ids are sorted and distinct, and the link keeps them
// (the caller must not modify them); all marks a change any id may have
// been part of: a reader crossing it re-reads everything, so it starts a
// new chain.
func Append(prev *Link, from, gen uint64, ids []uint32, all bool, lim Limits) *Link {
	l := &Link{gen: gen, from: from, all: all}
	if all {
		return l
	}
	l.ids = ids
	if prev != nil && prev.held+len(ids) <= lim.IDs && prev.links < lim.Links {
		l.prev, l.held, l.links = prev, prev.held, prev.links
	}
	l.held += len(ids)
	l.links++
	return l
}

// Since returns the ids the changes after generation since up to l were
// about, sorted and distinct — do not modify the slice — and true; or
// false when l cannot tell: since is older than the chain holds or not one
// of its generations, or an all link lies in between. A caller answers
// "since is l's own generation" (nothing changed) before asking; l may be
// nil (false).
func (l *Link) Since(since uint64) ([]uint32, bool) {
	var parts [][]uint32
	for ; l != nil && !l.all && l.gen > since; l = l.prev {
		parts = append(parts, l.ids)
		if l.from != since {
			continue
		}
		if len(parts) == 1 {
			return parts[0], true
		}
		var out []uint32
		for _, p := range parts {
			out = append(out, p...)
		}
		slices.Sort(out)
		return slices.Compact(out), true
	}
	return nil, false
}
