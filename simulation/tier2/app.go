package tier2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tenurehq/tenure/node"
)

// Env is what the harness gives an App's worker: its node and the
// recording helpers the checkers need.
type Env struct {
	// Node is the node process the worker runs on.
	Node *node.Node
	h    *harness
}

// Propose is Node.Propose that records an acknowledged command, so the
// harness checks it survives on every live replica (S3).
func (e *Env) Propose(ctx context.Context, tok node.Token, typ string, payload []byte) (node.Applied, error) {
	a, err := e.Node.Propose(ctx, tok, typ, payload)
	if err == nil {
		e.h.rec.acked(e.Node.ID(), a, typ, payload)
	}
	return a, err
}

// RunJobs starts and completes (or fails) every runnable job of tok's
// shard with handler, until none is left or ctx is done. A job handler
// error fails the attempt with a short backoff.
func (e *Env) RunJobs(ctx context.Context, tok node.Token, handler func(context.Context, node.Job) ([]byte, error)) error {
	for _, j := range e.Node.RunnableJobs(tok.Shard) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		started, err := e.Node.StartJob(ctx, tok, j)
		if err != nil {
			if errors.Is(err, node.ErrStaleToken) || errors.Is(err, node.ErrNotOwner) {
				return err
			}
			continue // another attempt raced us, or no quorum: next round
		}
		out, herr := handler(ctx, started)
		if herr != nil {
			_, _ = e.Node.FailJob(ctx, started, herr.Error(), 100*time.Millisecond)
			continue
		}
		_, _ = e.Node.CompleteJob(ctx, started, out)
	}
	return nil
}

// Sleep waits d of virtual time, or returns ctx's error.
func (e *Env) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Float returns a number in [0,1) from the scenario's seeded source.
func (e *Env) Float() float64 { return e.h.float() }

// probeType is the harness's own application command type, used to probe
// that stale tokens are rejected.
const probeType = "tier2.probe"

// probeSM accepts every command and keeps nothing.
type probeSM struct{}

func (probeSM) Apply(uint32, uint64, uint64, []byte) ([]byte, error) { return nil, nil }
func (probeSM) Snapshot() ([]byte, error)                            { return nil, nil }
func (probeSM) Restore([]byte) error                                 { return nil }

// enqueueLoop enqueues App.JobsPerSecond jobs through random live nodes
// until the faults stop.
func (h *harness) enqueueLoop() {
	if h.sc.App.JobsPerSecond <= 0 {
		return
	}
	every := time.Duration(float64(time.Second) / h.sc.App.JobsPerSecond)
	for h.sleep(every) && h.rec.now() < h.sc.FaultsUntil {
		nodes := h.live()
		if len(nodes) == 0 {
			continue
		}
		n := nodes[h.intn(len(nodes))]
		h.mu.Lock()
		h.jobSeq++
		key := fmt.Sprintf("job-%d", h.jobSeq)
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
		_, _, _ = n.Enqueue(ctx, node.JobSpec{Key: key, Type: "tier2", MaxAttempts: 100})
		cancel()
	}
}

// staleProbeLoop checks S2's second half from the outside: a node that
// acted at an epoch the shard has since moved past proposes with that
// old token, and must be refused with ErrStaleToken.
func (h *harness) staleProbeLoop() {
	for h.sleep(h.between(300*time.Millisecond, 900*time.Millisecond)) {
		nodes := h.live()
		if len(nodes) == 0 {
			continue
		}
		n := nodes[h.intn(len(nodes))]
		tok, ok := h.staleToken(n)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
		_, err := n.Propose(ctx, tok, probeType, []byte("stale"))
		cancel()
		h.rec.mu.Lock()
		switch {
		case err == nil:
			h.rec.stale.probes++
			h.rec.violate("S2", "%s proposed with stale token %s (shard at epoch %d) and it was accepted", n.ID(), tok, n.Shard(tok.Shard).Epoch)
		case errors.Is(err, node.ErrStaleToken):
			h.rec.stale.probes++
			h.rec.stale.rejected++
		}
		h.rec.mu.Unlock()
	}
}

// staleToken picks a token n acted with whose shard n's replica shows at a
// later epoch.
func (h *harness) staleToken(n *node.Node) (node.Token, bool) {
	h.rec.mu.Lock()
	var toks []node.Token
	for _, t := range h.rec.terms {
		if t.Node == n.ID() {
			toks = append(toks, t.Token)
		}
	}
	h.rec.mu.Unlock()
	for len(toks) > 0 {
		i := h.intn(len(toks))
		tok := toks[i]
		if n.Shard(tok.Shard).Epoch > tok.Epoch {
			return tok, true
		}
		toks = slices.Delete(toks, i, i+1)
	}
	return node.Token{}, false
}

// The built-in application: each shard's owner appends unique ids to a
// replicated per-shard log with fenced commands, and runs the shard's
// jobs. Its Check demands every acknowledged id on every live replica.

const logType = "tier2.log"

type defaultApp struct {
	h  *harness
	mu sync.Mutex
	// sms is the latest state machine of each node id.
	sms  map[string]*logSM
	next uint64
}

func newDefaultApp(h *harness) *defaultApp { return &defaultApp{h: h, sms: map[string]*logSM{}} }

func (d *defaultApp) app() App {
	return App{
		StateMachines: func(id string) map[string]node.StateMachine {
			sm := &logSM{ids: map[uint32][]uint64{}}
			d.mu.Lock()
			d.sms[id] = sm
			d.mu.Unlock()
			return map[string]node.StateMachine{logType: sm}
		},
		Worker:        d.worker,
		JobsPerSecond: 1,
		Check:         d.check,
	}
}

func (d *defaultApp) worker(ctx context.Context, env *Env, tok node.Token) error {
	for {
		if err := env.Sleep(ctx, time.Duration(300+env.Float()*600)*time.Millisecond); err != nil {
			return nil
		}
		d.mu.Lock()
		d.next++
		id := d.next
		d.mu.Unlock()
		payload, _ := json.Marshal(id)
		_, _ = env.Propose(ctx, tok, logType, payload)
		_ = env.RunJobs(ctx, tok, func(context.Context, node.Job) ([]byte, error) { return []byte("ok"), nil })
	}
}

// check: every acknowledged id is in every live node's log state machine.
func (d *defaultApp) check(nodes []*node.Node) error {
	d.h.rec.mu.Lock()
	var want []uint64
	for _, a := range d.h.rec.acks[:d.h.rec.ackCutoff] {
		if a.typ == logType {
			want = append(want, a.digest)
		}
	}
	d.h.rec.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		d.mu.Lock()
		sm := d.sms[n.ID()]
		d.mu.Unlock()
		have := sm.digests()
		missing := 0
		for _, w := range want {
			if !have[w] {
				missing++
			}
		}
		if missing > 0 {
			errs = append(errs, fmt.Errorf("%s's replicated log lacks %d of %d acknowledged entries", n.ID(), missing, len(want)))
		}
	}
	return errors.Join(errs...)
}

// logSM is a per-shard list of ids.
type logSM struct {
	mu  sync.Mutex
	ids map[uint32][]uint64
}

func (s *logSM) Apply(shard uint32, _ uint64, _ uint64, payload []byte) ([]byte, error) {
	var id uint64
	if err := json.Unmarshal(payload, &id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[shard] = append(s.ids[shard], id)
	return nil, nil
}

func (s *logSM) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Marshal(s.ids)
}

func (s *logSM) Restore(b []byte) error {
	ids := map[uint32][]uint64{}
	if err := json.Unmarshal(b, &ids); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = ids
	return nil
}

// digests returns the App digests of every id held.
func (s *logSM) digests() map[uint64]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint64]bool{}
	for _, ids := range s.ids {
		for _, id := range ids {
			b, _ := json.Marshal(id)
			out[appDigest(logType, b)] = true
		}
	}
	return out
}
