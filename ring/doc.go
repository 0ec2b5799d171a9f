// Package ring proposes shard owners.
//
// It owns: mapping a key to a shard (xxhash of the key modulo the partition
// count); Assign, the planner's minimal-move, balanced placement (strict
// quotas, rendezvous order, sticky; docs/ring.md); and the older
// bounded-load ring snapshot New (buraksezer/consistent with an xxhash
// hasher), kept for `tenure bench ring` and comparison, with per-member
// loads and the diff between two snapshots.
//
// It must not: do I/O, read the clock, start goroutines, or decide ownership.
// A ring is a proposal only; ownership/ commits decisions through the ledger.
// It never panics: configurations the underlying library cannot handle are
// rejected by Validate, and any remaining panic is recovered into an error.
package ring
