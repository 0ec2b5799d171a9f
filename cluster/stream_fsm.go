package cluster

// The committed-state stream's record of applied entries (cluster version
// 5, docs/control-group.md "The committed-state stream"). streamFSM sits
// between Raft (or the stream client) and the application's FSM: every
// entry the FSM applies passes through it, in order, under one lock. On a
// server it keeps the last entries in a bounded ring so subscribers can
// resume from their applied index; on every node it is the one gate that
// makes "exactly the next entry" hold whichever path delivers entries —
// Raft replication (a non-voter before version 5, or a standby) or the
// stream.
//
// Stream indexes are Raft log indexes of the entries the FSM sees
// (commands and configuration entries); no-ops and barriers never reach
// the FSM, so consecutive stream entries may skip Raft indexes. Each entry
// carries Prev, the index applied before it, and the stream client applies
// an entry only if Prev equals its own last index: a gap or a repeat is a
// protocol error, never a silent skip or a double apply (as Raft's
// AppendEntries checks prevLogIndex).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// Errors of the stream. Match them with errors.Is.
var (
	// ErrStreamGap: a stream entry does not follow the subscriber's last
	// applied index (a gap, a repeat or a reorder). Nothing was applied
	// from it on; the subscriber reconnects from its applied index.
	ErrStreamGap = errors.New("cluster: stream entry does not follow the applied index")
	// ErrStreamSnapshot: a stream snapshot could not be taken, was too
	// large, or did not restore to the index it claimed.
	ErrStreamSnapshot = errors.New("cluster: stream snapshot")
)

// streamPos is where a stream read must start.
type streamPos uint8

const (
	posEntries  streamPos = iota // entries follow from (possibly none yet)
	posSnapshot                  // from is gone from the buffer (or was never on this server's history)
	posAhead                     // from is beyond this server's applied index
)

// streamFSM wraps the application's FSM (see the file comment).
type streamFSM struct {
	inner   raft.FSM
	batch   raft.BatchingFSM   // inner as a BatchingFSM, nil if it is not one
	applied func() uint64      // the inner FSM's applied index (ControlConfig.AppliedIndex)
	snaps   raft.SnapshotStore // Raft's snapshots (Restore); nil in tests

	// Ring bounds: at most maxEntries entries and maxBytes bytes of data
	// (0 entries: record nothing, a member).
	maxEntries, maxBytes int

	mu    sync.Mutex
	last  uint64 // stream index of the last entry applied (or restored)
	ring  []wire.StreamEntry
	head  int // ring[head] is the oldest entry
	n     int // entries in the ring
	bytes int // data bytes in the ring
	wake  chan struct{}

	snapMu sync.Mutex // one snapshot build at a time
	snap   atomic.Pointer[streamSnapshot]
	snapID atomic.Uint64
}

// streamSnapshot is the FSM's snapshot at stream index index, serialized.
type streamSnapshot struct {
	id    uint64
	index uint64
	data  []byte
	taken time.Time
}

func newStreamFSM(inner raft.FSM, applied func() uint64, maxEntries, maxBytes int) *streamFSM {
	f := &streamFSM{inner: inner, applied: applied, maxEntries: maxEntries, maxBytes: maxBytes, wake: make(chan struct{})}
	f.batch, _ = inner.(raft.BatchingFSM)
	if maxEntries > 0 {
		f.ring = make([]wire.StreamEntry, maxEntries)
	}
	if applied != nil {
		f.last = applied()
	}
	return f
}

var _ raft.BatchingFSM = (*streamFSM)(nil)

// Apply implements raft.FSM.
func (f *streamFSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM: Raft's path. An entry at or
// below the last applied index was already applied from the stream (a
// non-voter that subscribed before the leader removed it from Raft): it is
// skipped, with a nil response nobody reads (only the leader reads
// responses, and the leader never follows the stream).
func (f *streamFSM) ApplyBatch(logs []*raft.Log) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]any, len(logs))
	todo := make([]*raft.Log, 0, len(logs))
	pos := make([]int, 0, len(logs))
	for i, l := range logs {
		if l.Index <= f.last {
			continue
		}
		todo = append(todo, l)
		pos = append(pos, i)
	}
	res := f.applyLocked(todo)
	for k, i := range pos {
		out[i] = res[k]
	}
	return out
}

// applyLocked applies logs (in order, each after f.last) to the inner FSM
// and records them.
func (f *streamFSM) applyLocked(logs []*raft.Log) []any {
	if len(logs) == 0 {
		return nil
	}
	var res []any
	if f.batch != nil {
		res = f.batch.ApplyBatch(logs)
	} else {
		res = make([]any, len(logs))
		for i, l := range logs {
			res[i] = f.inner.Apply(l)
		}
	}
	for _, l := range logs {
		e := wire.StreamEntry{Index: l.Index, Prev: f.last, Term: l.Term, Type: uint8(l.Type), Data: l.Data}
		if !l.AppendedAt.IsZero() {
			e.AppendedAt = l.AppendedAt.UnixNano()
		}
		f.record(e)
		f.last = l.Index
	}
	close(f.wake)
	f.wake = make(chan struct{})
	return res
}

// record appends e to the ring, evicting the oldest entries beyond the
// bounds.
func (f *streamFSM) record(e wire.StreamEntry) {
	if f.maxEntries == 0 {
		return
	}
	for f.n > 0 && (f.n == f.maxEntries || f.bytes+len(e.Data) > f.maxBytes) {
		old := &f.ring[f.head]
		f.bytes -= len(old.Data)
		*old = wire.StreamEntry{}
		f.head = (f.head + 1) % f.maxEntries
		f.n--
	}
	f.ring[(f.head+f.n)%f.maxEntries] = e
	f.n++
	f.bytes += len(e.Data)
}

func (f *streamFSM) at(i int) *wire.StreamEntry { return &f.ring[(f.head+i)%f.maxEntries] }

// Snapshot implements raft.FSM.
func (f *streamFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inner.Snapshot()
}

// Restore implements raft.FSM: Raft installs a snapshot. The ring is
// cleared; the stream goes on from the restored state's applied index.
//
// A node that followed the stream and then joined Raft (a standby) may be
// sent a snapshot older than its replica: restoring it would take the
// replica back in time (a node could see itself owning a shard it already
// handed over). When the newest snapshot in Raft's store — the one being
// installed, or a newer one — is at or below the stream index, the restore
// is skipped: the replica already holds that state and more, and Raft's
// entries after the snapshot that it already applied are skipped as well
// (ApplyBatch).
func (f *streamFSM) Restore(rc io.ReadCloser) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snaps != nil && f.last > 0 {
		if list, err := f.snaps.List(); err == nil && len(list) > 0 && list[0].Index <= f.last {
			_ = rc.Close()
			return nil
		}
	}
	if err := f.inner.Restore(rc); err != nil {
		return err
	}
	f.resetLocked()
	return nil
}

func (f *streamFSM) resetLocked() {
	for i := range f.ring {
		f.ring[i] = wire.StreamEntry{}
	}
	f.head, f.n, f.bytes = 0, 0, 0
	if f.applied != nil {
		f.last = f.applied()
	}
	f.snap.Store(nil)
	close(f.wake)
	f.wake = make(chan struct{})
}

// lastIndex is the stream index of the last applied entry.
func (f *streamFSM) lastIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// read returns the entries after from (at most maxBytes of data, at least
// one entry), where from stands, and a channel closed at the next apply.
func (f *streamFSM) read(from uint64, maxBytes int) ([]wire.StreamEntry, streamPos, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case from == f.last:
		return nil, posEntries, f.wake
	case from > f.last:
		return nil, posAhead, f.wake
	case f.n == 0:
		return nil, posSnapshot, f.wake
	}
	// The first entry after from.
	i := sort.Search(f.n, func(i int) bool { return f.at(i).Index > from })
	if i == f.n || f.at(i).Prev != from {
		// Compacted past from, or from is not an index of this server's
		// history (a snapshot restored at an index without an entry).
		return nil, posSnapshot, f.wake
	}
	var out []wire.StreamEntry
	size := 0
	for ; i < f.n; i++ {
		e := f.at(i)
		if len(out) > 0 && size+len(e.Data) > maxBytes {
			break
		}
		out = append(out, *e)
		size += len(e.Data)
	}
	return out, posEntries, f.wake
}

// snapshotFor returns a serialized snapshot a subscriber at from can
// resume from: the cached one while entries after its index are still in
// the ring, else a fresh one (at most maxSize bytes).
func (f *streamFSM) snapshotFor(maxSize int) (*streamSnapshot, error) {
	f.snapMu.Lock()
	defer f.snapMu.Unlock()
	if s := f.snap.Load(); s != nil {
		if _, pos, _ := f.read(s.index, 1); pos == posEntries {
			return s, nil
		}
	}
	f.mu.Lock()
	fs, err := f.inner.Snapshot()
	index := f.last
	f.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStreamSnapshot, err)
	}
	defer fs.Release()
	sink := &memSink{max: maxSize}
	if err := fs.Persist(sink); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStreamSnapshot, err)
	}
	s := &streamSnapshot{id: f.snapID.Add(1), index: index, data: sink.buf.Bytes(), taken: time.Now()}
	f.snap.Store(s)
	return s, nil
}

// cachedSnapshot returns the cached snapshot with id, nil if it is gone.
func (f *streamFSM) cachedSnapshot(id uint64) *streamSnapshot {
	if s := f.snap.Load(); s != nil && s.id == id {
		return s
	}
	return nil
}

// applyStream applies stream entries on a subscriber. The first entry
// must follow the last applied index exactly, and each the one before it;
// otherwise nothing from the offending entry on is applied and the error
// wraps ErrStreamGap. It returns how many entries it applied.
func (f *streamFSM) applyStream(entries []wire.StreamEntry) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	logs := make([]*raft.Log, 0, len(entries))
	prev := f.last
	var gap error
	for _, e := range entries {
		if e.Prev != prev || e.Index <= prev {
			gap = fmt.Errorf("%w: entry %d follows %d, applied index is %d", ErrStreamGap, e.Index, e.Prev, prev)
			break
		}
		if e.Type != uint8(raft.LogCommand) && e.Type != uint8(raft.LogConfiguration) {
			gap = fmt.Errorf("%w: entry %d has log type %d", ErrStreamGap, e.Index, e.Type)
			break
		}
		l := &raft.Log{Index: e.Index, Term: e.Term, Type: raft.LogType(e.Type), Data: e.Data}
		if e.AppendedAt != 0 {
			l.AppendedAt = time.Unix(0, e.AppendedAt)
		}
		logs = append(logs, l)
		prev = e.Index
	}
	f.applyLocked(logs)
	return len(logs), gap
}

// restoreStream installs a snapshot received from the stream at index.
func (f *streamFSM) restoreStream(data []byte, index uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		return fmt.Errorf("%w: restore: %w", ErrStreamSnapshot, err)
	}
	f.resetLocked()
	if f.applied != nil && f.last != index {
		return fmt.Errorf("%w: restored state is at index %d, the server said %d", ErrStreamSnapshot, f.last, index)
	}
	f.last = index
	return nil
}

// memSink is a raft.SnapshotSink into memory, bounded by max bytes.
type memSink struct {
	buf bytes.Buffer
	max int
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.max > 0 && s.buf.Len()+len(p) > s.max {
		return 0, fmt.Errorf("%w: larger than %d bytes", ErrStreamSnapshot, s.max)
	}
	return s.buf.Write(p)
}
func (s *memSink) Close() error  { return nil }
func (s *memSink) ID() string    { return "stream" }
func (s *memSink) Cancel() error { return nil }

// skipTo moves the stream index to index without applying the entries
// before it: only the StreamResumeSkips mutation does this.
func (f *streamFSM) skipTo(index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if index > f.last {
		f.last = index
	}
}
