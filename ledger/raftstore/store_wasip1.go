//go:build wasip1

package raftstore

import (
	"errors"
	"fmt"
)

// OpenStore is not available on wasip1: bbolt needs mmap and file locks.
// Under wasip1 (the simulator's exact-replay tier) nodes keep their raft
// stores in memory (node.MemNetwork).
func OpenStore(dir string, _ StoreOptions) (*Store, error) {
	return nil, fmt.Errorf("ledger: open %s: %w", dir, errNoDiskStore)
}

var errNoDiskStore = errors.New("no disk store on wasip1 (bbolt needs mmap and file locks)")
