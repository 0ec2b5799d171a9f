//go:build !wasip1

package raftstore

import (
	"github.com/tenurehq/tenure/ledger"

	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// A validator of bbolt's file format, run on raft.db before bbolt opens
// (and mmaps) it. bbolt trusts its file: a truncated file makes reads of
// the mapping fault (SIGBUS, which no recover catches), a page of garbage
// panics inside bbolt, and with NoFreelistSync (our setting) bbolt's open
// scans the whole tree and panics on any inconsistency in a goroutine of
// its own — a crash no caller can turn into an error. So the file is read
// here with plain reads first: both meta pages, the size against the page
// size and the high-water mark, then every page reachable from the root
// bucket (type, bounds, element layout, key order, single reference).
//
// The format (bbolt v1.4, version 2, native byte order): a file is a
// sequence of pages of the meta's page size. Every page starts with a
// 16-byte header: id u64, flags u16, count u16, overflow u32 (the page
// spans 1+overflow pages). Pages 0 and 1 are meta pages; after the header:
// magic u32, version u32, pageSize u32, flags u32, root bucket (root page
// u64, sequence u64), freelist page u64, high-water mark (page count) u64,
// txid u64, then an FNV-64a checksum u64 of the 56 bytes before it. bbolt
// uses the valid meta with the larger txid. Branch pages hold count
// 16-byte elements (pos u32, ksize u32, child page u64), leaf pages count
// 16-byte elements (flags u32, pos u32, ksize u32, vsize u32); pos is from
// the element to its key, the value follows the key. A leaf element with
// flag 1 is a sub-bucket: its value is a bucket header (root u64, sequence
// u64), followed by an inline leaf page when root is 0.

const (
	boltMagic         = 0xED0CDAED
	boltVersion       = 2
	boltPageHeader    = 16
	boltElemSize      = 16
	boltMetaSize      = 64 // through the checksum
	boltBranchFlag    = 0x01
	boltLeafFlag      = 0x02
	boltMetaFlag      = 0x04
	boltFreelistFlag  = 0x10
	boltBucketLeaf    = 0x01
	boltNoFreelist    = ^uint64(0)
	boltMinPageSize   = 512
	boltMaxPageSize   = 1 << 24
	boltMaxCheckDepth = 64
)

var boltOrder = binary.NativeEndian

// boltMeta is a decoded meta page.
type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// parseBoltMeta decodes and validates the meta page in p (a page's bytes,
// header included).
func parseBoltMeta(p []byte) (boltMeta, error) {
	if len(p) < boltPageHeader+boltMetaSize {
		return boltMeta{}, errors.New("short page")
	}
	m := p[boltPageHeader:]
	if magic := boltOrder.Uint32(m[0:]); magic != boltMagic {
		return boltMeta{}, fmt.Errorf("bad magic %#x (want %#x: not a bolt file)", magic, uint32(boltMagic))
	}
	if v := boltOrder.Uint32(m[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("format version %d (want %d)", v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if sum := boltOrder.Uint64(m[56:]); sum != h.Sum64() {
		return boltMeta{}, fmt.Errorf("checksum %#x does not match contents (%#x)", sum, h.Sum64())
	}
	bm := boltMeta{
		pageSize: boltOrder.Uint32(m[8:]),
		root:     boltOrder.Uint64(m[16:]),
		freelist: boltOrder.Uint64(m[32:]),
		pgid:     boltOrder.Uint64(m[40:]),
		txid:     boltOrder.Uint64(m[48:]),
	}
	if ps := bm.pageSize; ps < boltMinPageSize || ps > boltMaxPageSize || ps&(ps-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d", ps)
	}
	return bm, nil
}

// checkBoltFile validates the bolt file f (size bytes) without mapping it.
// The error says what is wrong; OpenStore wraps it in ledger.ErrStoreCorrupt.
func checkBoltFile(f io.ReaderAt, size int64) error {
	if size == 0 {
		return errors.New("the file is empty (0 bytes): it was never initialized or was truncated")
	}
	read := func(off int64, n int) ([]byte, error) {
		b := make([]byte, n)
		k, err := f.ReadAt(b, off)
		if k == n {
			return b, nil
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	const probe = boltPageHeader + boltMetaSize
	if size < probe {
		return fmt.Errorf("the file is truncated: %d bytes, shorter than one meta page", size)
	}
	p0, err := read(0, probe)
	if err != nil {
		return fmt.Errorf("read meta page 0: %w", err)
	}
	m0, err0 := parseBoltMeta(p0)
	var m1 boltMeta
	var err1 error = errors.New("not found at any page size")
	if err0 == nil {
		if int64(m0.pageSize)+probe > size {
			err1 = fmt.Errorf("missing (file of %d bytes ends inside it)", size)
		} else if p1, err := read(int64(m0.pageSize), probe); err != nil {
			err1 = err
		} else {
			m1, err1 = parseBoltMeta(p1)
		}
	} else {
		// Page size unknown: try this OS's page size (bbolt's default),
		// then where bbolt would (1 KiB .. 16 MiB).
		sizes := []int64{int64(os.Getpagesize())}
		for ps := int64(1024); ps <= boltMaxPageSize; ps <<= 1 {
			sizes = append(sizes, ps)
		}
		for i, ps := range sizes {
			if ps+probe > size {
				continue
			}
			p1, err := read(ps, probe)
			if err != nil {
				continue
			}
			m, err := parseBoltMeta(p1)
			if err == nil && int64(m.pageSize) != ps {
				err = fmt.Errorf("page size %d at offset %d", m.pageSize, ps)
			}
			if err == nil {
				m1, err1 = m, nil
				break
			}
			if i == 0 {
				err1 = err
			}
		}
	}
	if err0 != nil && err1 != nil {
		return fmt.Errorf("both meta pages are invalid (meta 0: %v; meta 1: %v)", err0, err1)
	}
	// The meta bbolt will use: the valid one with the larger txid.
	m := m0
	if err0 != nil || (err1 == nil && m1.txid > m0.txid) {
		m = m1
	}
	if err0 == nil && err1 == nil && m0.pageSize != m1.pageSize {
		return fmt.Errorf("meta pages disagree on the page size (%d, %d)", m0.pageSize, m1.pageSize)
	}
	ps := int64(m.pageSize)
	if size < 2*ps {
		return fmt.Errorf("the file is truncated: %d bytes, shorter than its two meta pages of %d", size, ps)
	}
	if size%ps != 0 {
		return fmt.Errorf("the file is truncated or padded: %d bytes is not a multiple of the page size %d", size, ps)
	}
	if m.pgid < 2 || m.pgid > uint64(size/ps) {
		return fmt.Errorf("the file is truncated: the meta page counts %d pages, the file holds %d", m.pgid, size/ps)
	}
	w := &boltWalker{f: f, ps: ps, hwm: m.pgid, seen: make(map[uint64]bool)}
	if m.freelist != boltNoFreelist {
		if _, err := w.page(m.freelist, boltFreelistFlag); err != nil {
			return fmt.Errorf("freelist: %w", err)
		}
	}
	if err := w.walk(m.root, nil, nil, 0); err != nil {
		return err
	}
	return nil
}

// boltWalker reads and checks the page tree with plain reads.
type boltWalker struct {
	f    io.ReaderAt
	ps   int64
	hwm  uint64
	seen map[uint64]bool
}

// page reads page id (with its overflow pages), checks its header against
// want (a flags mask) and the high-water mark, and marks it referenced.
func (w *boltWalker) page(id uint64, want uint16) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d: out of bounds (the file has %d pages)", id, w.hwm)
	}
	hdr := make([]byte, boltPageHeader)
	if _, err := w.f.ReadAt(hdr, int64(id)*w.ps); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := boltOrder.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d: header names page %d", id, got)
	}
	flags, overflow := boltOrder.Uint16(hdr[8:]), uint64(boltOrder.Uint32(hdr[12:]))
	if flags&want == 0 || flags&^(boltBranchFlag|boltLeafFlag|boltMetaFlag|boltFreelistFlag) != 0 {
		return nil, fmt.Errorf("page %d: unexpected page type (flags %#x)", id, flags)
	}
	if id+overflow >= w.hwm {
		return nil, fmt.Errorf("page %d: %d overflow pages run past the end of the file (%d pages)", id, overflow, w.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d: referenced twice", i)
		}
		w.seen[i] = true
	}
	b := make([]byte, int64(overflow+1)*w.ps)
	if _, err := w.f.ReadAt(b, int64(id)*w.ps); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return b, nil
}

// walk checks the subtree at page id, whose keys must lie in [lo, hi)
// (nil: unbounded).
func (w *boltWalker) walk(id uint64, lo, hi []byte, depth int) error {
	if depth > boltMaxCheckDepth {
		return fmt.Errorf("page %d: tree deeper than %d", id, boltMaxCheckDepth)
	}
	p, err := w.page(id, boltBranchFlag|boltLeafFlag)
	if err != nil {
		return err
	}
	return w.checkPage(id, p, lo, hi, depth)
}

// checkPage checks one branch or leaf page (p, read or inline) and
// descends into its children and sub-buckets.
func (w *boltWalker) checkPage(id uint64, p, lo, hi []byte, depth int) error {
	flags, count := boltOrder.Uint16(p[8:]), int(boltOrder.Uint16(p[10:]))
	if boltPageHeader+count*boltElemSize > len(p) {
		return fmt.Errorf("page %d: %d elements do not fit in the page", id, count)
	}
	type elem struct {
		key, val []byte
		child    uint64
		bucket   bool
	}
	elems := make([]elem, count)
	for i := range elems {
		off := boltPageHeader + i*boltElemSize
		e := p[off : off+boltElemSize]
		var pos, ksize, vsize uint64
		if flags&boltBranchFlag != 0 {
			pos, ksize = uint64(boltOrder.Uint32(e)), uint64(boltOrder.Uint32(e[4:]))
			elems[i].child = boltOrder.Uint64(e[8:])
		} else {
			elems[i].bucket = boltOrder.Uint32(e)&boltBucketLeaf != 0
			pos, ksize, vsize = uint64(boltOrder.Uint32(e[4:])), uint64(boltOrder.Uint32(e[8:])), uint64(boltOrder.Uint32(e[12:]))
		}
		start := uint64(off) + pos
		if end := start + ksize + vsize; end > uint64(len(p)) {
			return fmt.Errorf("page %d: element %d (key %d, value %d bytes at %d) runs past the page", id, i, ksize, vsize, start)
		}
		elems[i].key, elems[i].val = p[start:start+ksize], p[start+ksize:start+ksize+vsize]
		k := elems[i].key
		if lo != nil && bytes.Compare(k, lo) < 0 || hi != nil && bytes.Compare(k, hi) >= 0 {
			return fmt.Errorf("page %d: element %d: key %x outside its parent's range", id, i, k)
		}
		if i > 0 && bytes.Compare(elems[i-1].key, k) >= 0 {
			return fmt.Errorf("page %d: element %d: keys out of order", id, i)
		}
	}
	for i, e := range elems {
		if flags&boltBranchFlag != 0 {
			next := hi
			if i+1 < len(elems) {
				next = elems[i+1].key
			}
			if err := w.walk(e.child, e.key, next, depth+1); err != nil {
				return err
			}
			continue
		}
		if !e.bucket {
			continue
		}
		if len(e.val) < 16 {
			return fmt.Errorf("page %d: element %d: bucket header of %d bytes", id, i, len(e.val))
		}
		if root := boltOrder.Uint64(e.val); root != 0 {
			if err := w.walk(root, nil, nil, depth+1); err != nil {
				return fmt.Errorf("bucket %q: %w", e.key, err)
			}
			continue
		}
		inline := e.val[16:]
		if len(inline) < boltPageHeader || boltOrder.Uint16(inline[8:])&boltLeafFlag == 0 {
			return fmt.Errorf("page %d: element %d: bucket %q: malformed inline page", id, i, e.key)
		}
		if err := w.checkPage(id, inline, nil, nil, depth+1); err != nil {
			return fmt.Errorf("bucket %q: %w", e.key, err)
		}
	}
	return nil
}

// checkBoltPath validates the bolt file at path; a missing file is fine
// (bbolt creates it). It holds a shared lock while it reads, so a file
// being written by another process is reported as locked, not corrupt.
func checkBoltPath(path string, opts StoreOptions) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger: open %s: %w", path, err)
	}
	defer f.Close()
	if err := lockShared(f, opts.LockTimeout); err != nil {
		if errors.Is(err, errLockTimeout) {
			return fmt.Errorf("%w: %s is held by another process (waited %v)", ledger.ErrStoreLocked, path, opts.LockTimeout)
		}
		return fmt.Errorf("ledger: lock %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file; %s", ledger.ErrStoreCorrupt, path, damagedAdvice)
	}
	if err := checkBoltFile(f, st.Size()); err != nil {
		return fmt.Errorf("%w: %s: %v; %s", ledger.ErrStoreCorrupt, path, err, damagedAdvice)
	}
	return nil
}

// damagedAdvice ends every damaged-storage error.
const damagedAdvice = "restore the data dir from a backup, or remove the data dir and rejoin as a new member under a new node id (docs/operations.md, \"Damaged storage\")"
