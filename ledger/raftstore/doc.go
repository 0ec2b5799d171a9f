// Package raftstore keeps one data dir's Raft stores: the log and stable
// store in a bolt file (raft-boltdb/v2, fsync on) behind a log cache, and
// the file snapshot store. OpenStore checks the bolt file with plain reads
// under a shared lock before bbolt maps it (boltcheck.go), so a damaged or
// foreign file fails with ledger.ErrStoreCorrupt and a held one with
// ledger.ErrStoreLocked instead of crashing the process. It knows nothing of
// the ledger's commands; the sentinels are the ledger's (they have wire
// codes in ledger.Result).
package raftstore
