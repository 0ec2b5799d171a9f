// Package ring proposes shard owners with bounded-load consistent hashing.
//
// It owns: mapping a key to a shard (xxhash of the key modulo the partition
// count), building an immutable, deterministic ring snapshot over a sorted
// member set (buraksezer/consistent with an xxhash hasher), per-member loads
// and the diff between two snapshots.
//
// It must not: do I/O, read the clock, start goroutines, or decide ownership.
// A ring is a proposal only; ownership/ commits decisions through the ledger.
// It never panics: configurations the underlying library cannot handle are
// rejected by Validate, and any remaining panic is recovered into an error.
package ring
