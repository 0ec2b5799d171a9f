package ledger

import (
	"bufio"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// Snapshot format (docs/ledger.md): a version byte, then counters and
// settings, then each table as a uvarint count followed by its records in
// key order (the same field encoding as Result), then the application
// snapshots as (type, bytes) pairs sorted by type. Records are streamed to
// the sink one by one.

// snapshotVersion 2 added ShardRecord.AvoidOwner and the elections table;
// version 3 the cluster config and NodeRecord's version range; version 4
// the session table; version 5 the operator's pins and exclusions and the
// log's clock (cluster version 3: VersionPlacementRules, VersionLogTime).
// A snapshot is written as version 5 only once the cluster runs version 3
// (or holds a pin or exclusion, which needs it), so a binary of the
// previous release can install the snapshots of a cluster that has not
// finalized 3. Version 6 adds the fenced-takeover policy (takeover.go) and
// the logged settings (logsettings.go), written only once the cluster runs
// version 4 or a policy exists.
// Versions 1 to 5 are still read.
// Version 7 adds the session entries' body digests, written once the
// cluster runs version 5 (VersionJobsAPI), and the deny-list (revoke.go;
// VersionRevocation).
const snapshotVersion byte = 7

// maxSnapshotCount bounds table sizes read from a snapshot.
const maxSnapshotCount = 1 << 32

// MaxSnapshotSize is the largest snapshot Restore reads (a larger one is
// refused with ErrTooLarge before it is all in memory), and so the cap on
// an InstallSnapshot stream the node's Raft guard accepts
// (cluster.ControlConfig.MaxInstallSnapshot) and on a snapshot over the
// committed-state stream.
const MaxSnapshotSize int64 = 512 << 20

type fsmSnapshot struct {
	st   *State
	apps []appSnap
}

type appSnap struct {
	typ  string
	data []byte
}

// Snapshot implements raft.FSM. It is cheap: it takes the immutable State
// and asks each application state machine for its point-in-time bytes.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h := f.halt.Load(); h != nil {
		return nil, fmt.Errorf("ledger: no snapshot while halted (it would claim entries never applied): %w", h.err())
	}
	s := &fsmSnapshot{st: f.st.clone()}
	for _, t := range f.appTypes() {
		b, err := f.apps[t].Snapshot()
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot of application type %q: %w", t, err)
		}
		s.apps = append(s.apps, appSnap{t, b})
	}
	return s, nil
}

// Persist implements raft.FSMSnapshot: it streams the snapshot to sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}

func (s *fsmSnapshot) writeTo(out io.Writer) error {
	bw := bufio.NewWriterSize(out, 64<<10)
	st := s.st
	ver := snapshotVersion
	if !st.VersionActive(VersionJobsAPI) && len(st.revoked) == 0 {
		ver = 6
	}
	if ver == 6 && !st.VersionActive(VersionFencedTakeover) && len(st.fenced) == 0 && !st.settings.Logged {
		ver = 5
	}
	if ver == 5 && !st.VersionActive(VersionLogTime) && st.pins.Len() == 0 && st.excluded.Len() == 0 {
		ver = 4
	}
	w := &writer{ver: ver}
	var err error
	flush := func() {
		if err == nil && len(w.b) > 0 {
			_, err = bw.Write(w.b)
		}
		w.b = w.b[:0]
	}
	w.b = append(w.b, ver)
	w.u(st.applied)
	w.u(st.nextJob)
	w.u(st.finishSeq)
	w.i(st.settings.JobRetention)
	w.u(uint64(st.settings.MaxFinishedJobs))
	w.u(uint64(st.settings.DefaultMaxAttempts))
	w.u(uint64(st.shards.Len()))
	st.shards.Ascend(func(r ShardRecord) bool { shardFields(codec{w: w}, r); flush(); return err == nil })
	w.u(uint64(st.nodes.Len()))
	st.nodes.Ascend(func(r NodeRecord) bool { nodeFields(codec{w: w}, r); flush(); return err == nil })
	w.u(uint64(st.jobs.Len()))
	st.jobs.Ascend(func(it jobItem) bool { jobFields(codec{w: w}, *it.j); flush(); return err == nil })
	w.u(uint64(st.finished.Len()))
	st.finished.Ascend(func(k finishedKey) bool { w.u(k.seq); w.u(k.id); flush(); return err == nil })
	w.u(uint64(st.partitions))
	w.u(uint64(st.elections.Len()))
	st.elections.Ascend(func(e ElectionRecord) bool { electionFields(codec{w: w}, e); flush(); return err == nil })
	w.str(st.cluster.Name)
	w.u(uint64(st.cluster.Partitions))
	w.u(uint64(st.cluster.Version))
	w.i(st.cluster.FinalizedAt)
	w.u(st.sessionSeq)
	w.u(uint64(st.sessionOrder.Len()))
	st.sessionOrder.Ascend(func(o sessionOrder) bool {
		e, ok := st.sessions.Get(sessionEntry{id: o.id})
		if !ok {
			err = fmt.Errorf("ledger: session table: request %s in the order index only", o.id)
			return false
		}
		if eerr := encodeSessionEntry(w, e); eerr != nil {
			err = eerr
			return false
		}
		flush()
		return err == nil
	})
	if ver >= 5 {
		w.u(uint64(st.pins.Len()))
		st.pins.Ascend(func(p PinRecord) bool { encodePin(w, p); flush(); return err == nil })
		w.u(uint64(st.excluded.Len()))
		st.excluded.Ascend(func(e ExcludeRecord) bool { encodeExclude(w, e); flush(); return err == nil })
		w.i(st.logTime)
	}
	if ver >= snapshotFencedTakeover {
		encodeFencedSection(w, st)
		flush()
	}
	if ver >= snapshotLogSettings {
		writeSnapshotSettings(w, st.settings)
	}
	if ver >= snapshotRevocation {
		writeSnapshotRevocations(w, st)
	}
	w.u(uint64(len(s.apps)))
	for _, a := range s.apps {
		w.str(a.typ)
		w.u(uint64(len(a.data)))
		flush()
		if err == nil {
			_, err = bw.Write(a.data)
		}
	}
	flush()
	if err != nil {
		return fmt.Errorf("ledger: write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("ledger: write snapshot: %w", err)
	}
	return nil
}

// Restore implements raft.FSM: it replaces the whole state (including the
// registered application state machines) with the snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxSnapshotSize+1))
	if err != nil {
		return fmt.Errorf("ledger: read snapshot: %w", err)
	}
	if int64(len(b)) > MaxSnapshotSize {
		return fmt.Errorf("%w: snapshot over %d bytes", ErrTooLarge, MaxSnapshotSize)
	}
	st, apps, err := decodeSnapshot(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st.settings = st.settings.localLimits(f.cfg)
	for _, a := range apps {
		if _, ok := f.apps[a.typ]; !ok {
			return fmt.Errorf("%w: snapshot holds application type %q, not registered here", ErrUnknownType, a.typ)
		}
	}
	byType := map[string][]byte{}
	for _, a := range apps {
		byType[a.typ] = a.data
	}
	for _, t := range f.appTypes() {
		if err := f.apps[t].Restore(byType[t]); err != nil {
			return fmt.Errorf("ledger: restore application type %q: %w", t, err)
		}
	}
	f.st = st
	f.dirty = dirtyAll
	f.publish()
	return nil
}

func decodeSnapshot(b []byte) (*State, []appSnap, error) {
	if len(b) < 1 || b[0] < 1 || b[0] > snapshotVersion {
		return nil, nil, fmt.Errorf("%w: snapshot version", ErrVersion)
	}
	r := &reader{b: b[1:], ver: b[0]}
	st := newState(LedgerSettings{})
	st.applied = r.u()
	st.nextJob = r.u()
	st.finishSeq = r.u()
	st.settings = LedgerSettings{JobRetention: r.i(), MaxFinishedJobs: r.u32(), DefaultMaxAttempts: r.u32()}
	count := func() uint64 {
		n := r.u()
		if n > maxSnapshotCount || n > uint64(len(r.b)) {
			r.fail(fmt.Errorf("%w: snapshot table of %d records in %d bytes", ErrMalformed, n, len(r.b)))
			return 0
		}
		return n
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		st.shards.ReplaceOrInsert(shardFields(codec{r: r}, ShardRecord{}))
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		st.nodes.ReplaceOrInsert(nodeFields(codec{r: r}, NodeRecord{}))
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		j := jobFields(codec{r: r}, JobRecord{})
		st.jobs.ReplaceOrInsert(jobItem{j.ID, &j})
		st.jobIdx.ReplaceOrInsert(jobIndexKey{j.Shard, j.State, j.ID})
		if j.Key != "" {
			st.keyIdx.ReplaceOrInsert(jobKeyKey{j.Shard, j.Key, j.ID})
		}
	}
	for n := count(); n > 0 && r.err == nil; n-- {
		st.finished.ReplaceOrInsert(finishedKey{seq: r.u(), id: r.u()})
	}
	if r.ver >= 2 {
		st.partitions = r.u32()
		for n := count(); n > 0 && r.err == nil; n-- {
			st.elections.ReplaceOrInsert(electionFields(codec{r: r}, ElectionRecord{}))
		}
	}
	if r.ver >= 3 {
		st.cluster = ClusterInfo{Name: r.str(), Partitions: r.u32(), Version: r.u32(), FinalizedAt: r.i()}
	}
	if r.ver >= 4 {
		st.sessionSeq = r.u()
		for n := count(); n > 0 && r.err == nil; n-- {
			e := decodeSessionEntry(r)
			if r.err != nil {
				break
			}
			if _, dup := st.sessions.Get(e); dup || e.id.IsZero() || e.seq == 0 || e.seq > st.sessionSeq {
				r.fail(fmt.Errorf("%w: snapshot session %s (seq %d of %d): zero, repeated or out of sequence", ErrMalformed, e.id, e.seq, st.sessionSeq))
				break
			}
			if o, ok := st.sessionOrder.Max(); ok && o.seq >= e.seq {
				r.fail(fmt.Errorf("%w: snapshot sessions out of order (seq %d after %d)", ErrMalformed, e.seq, o.seq))
				break
			}
			st.sessions.ReplaceOrInsert(e)
			st.sessionOrder.ReplaceOrInsert(sessionOrder{seq: e.seq, id: e.id})
		}
	}
	if r.ver >= 5 {
		for n := count(); n > 0 && r.err == nil; n-- {
			p := decodePin(r)
			if last, ok := st.pins.Max(); r.err == nil && ((ok && last.Shard >= p.Shard) || p.Node == "") {
				r.fail(fmt.Errorf("%w: snapshot pin of shard %d to %q: empty or out of order", ErrMalformed, p.Shard, p.Node))
				break
			}
			st.pins.ReplaceOrInsert(p)
		}
		for n := count(); n > 0 && r.err == nil; n-- {
			e := decodeExclude(r)
			if last, ok := st.excluded.Max(); r.err == nil && ((ok && last.Node >= e.Node) || e.Node == "") {
				r.fail(fmt.Errorf("%w: snapshot exclusion of %q: empty or out of order", ErrMalformed, e.Node))
				break
			}
			st.excluded.ReplaceOrInsert(e)
		}
		st.logTime = r.i()
	}
	if r.ver >= snapshotFencedTakeover {
		decodeFencedSection(r, st, count)
	}
	if r.ver >= snapshotLogSettings {
		readSnapshotSettings(r, &st.settings)
	}
	if r.ver >= snapshotRevocation {
		readSnapshotRevocations(r, st, count)
	}
	var apps []appSnap
	for n := count(); n > 0 && r.err == nil; n-- {
		t := r.str()
		data := r.raw(uint64(len(r.b)))
		apps = append(apps, appSnap{t, append([]byte(nil), data...)})
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("ledger: decode snapshot: %w", r.err)
	}
	if len(r.b) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing snapshot bytes", ErrMalformed, len(r.b))
	}
	return st, apps, nil
}
