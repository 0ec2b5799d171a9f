package raftstore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzCheckBoltFile: the bolt file checks never panic and never read
// outside the file, whatever its bytes (bbolt itself would SIGBUS or panic
// on many of these).
func FuzzCheckBoltFile(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 4096))
	f.Add(bytes.Repeat([]byte{0xed, 0xda, 0x0c, 0xed}, 2048))
	// A real store's file, and damaged copies of it.
	dir := f.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		f.Fatal(err)
	}
	if err := st.Close(); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, off := range []int{16, 32, 4096 + 16, 2 * 4096, 3*4096 + 20} {
		if off < len(good) {
			bad := bytes.Clone(good)
			bad[off] ^= 0xff
			f.Add(bad)
		}
	}
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, in []byte) {
		_ = checkBoltFile(bytes.NewReader(in), int64(len(in)))
	})
}
