package ledger

import (
	"context"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Replica digests: a hash of the whole replicated state (the snapshot
// encoding: every table, the counters, the settings, the cluster config
// and the application state machines' snapshots) taken right after a
// chosen log index is applied. Replicas that applied the same log agree;
// one that skipped or misapplied an entry does not. Tests and the
// rolling-upgrade check compare them across nodes.

// maxDigestRequests bounds the indexes waiting for a digest.
const maxDigestRequests = 64

// RequestDigest asks the FSM to hash its state right after it applies
// index. It fails if index was already applied (the state at it is gone)
// or too many requests wait.
func (f *FSM) RequestDigest(index uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.digests[index]; ok {
		return nil
	}
	if index <= f.st.applied {
		return fmt.Errorf("%w: index %d already applied (at %d): ask for a later one", ErrInvalid, index, f.st.applied)
	}
	if len(f.digestWant) >= maxDigestRequests {
		return fmt.Errorf("%w: %d digests already requested", ErrTooLarge, len(f.digestWant))
	}
	if f.digestWant == nil {
		f.digestWant = map[uint64]bool{}
	}
	f.digestWant[index] = true
	return nil
}

// Digest waits until the digest requested at index is known, or ctx ends.
func (f *FSM) Digest(ctx context.Context, index uint64) (uint64, error) {
	for {
		f.mu.Lock()
		d, ok := f.digests[index]
		_, want := f.digestWant[index]
		halted := f.halt.Load()
		f.mu.Unlock()
		switch {
		case ok:
			return d, nil
		case !want:
			return 0, fmt.Errorf("%w: no digest requested at index %d", ErrInvalid, index)
		case halted != nil:
			return 0, halted.err()
		}
		if err := f.WaitApplied(ctx, index); err != nil {
			return 0, err
		}
	}
}

// takeDigest hashes the working state if a digest was requested at index.
// Called under f.mu right after index is applied.
func (f *FSM) takeDigest(index uint64) {
	if !f.digestWant[index] {
		return
	}
	delete(f.digestWant, index)
	h := xxhash.New()
	s := &fsmSnapshot{st: f.st}
	for _, t := range f.appTypes() {
		b, err := f.apps[t].Snapshot()
		if err != nil {
			b = []byte("snapshot error: " + err.Error())
		}
		s.apps = append(s.apps, appSnap{t, b})
	}
	if err := s.writeTo(h); err != nil {
		return
	}
	if f.digests == nil {
		f.digests = map[uint64]uint64{}
	}
	if len(f.digests) >= maxDigestRequests {
		for k := range f.digests { // forget an arbitrary old one
			delete(f.digests, k)
			break
		}
	}
	f.digests[index] = h.Sum64()
}
