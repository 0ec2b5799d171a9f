package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// applyLag holds one command's Apply on one node until release: that
// node's FSM lags behind what Raft committed and handed to it, as a
// leader's replica does under load (Raft counts an entry applied once it
// handed it to the FSM, not once the FSM applied it).
type applyLag struct {
	mu        sync.Mutex
	node, cmd string
	gate      chan struct{} // closed by release
	held      chan struct{} // closed once the held Apply waits
	heldOnce  sync.Once
	relOnce   sync.Once
}

// arm holds cmd's Apply on node (call it inside the bubble).
func (a *applyLag) arm(node, cmd string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.node, a.cmd = node, cmd
	a.gate, a.held = make(chan struct{}), make(chan struct{})
}

// release lets the held Apply go on (idempotent).
func (a *applyLag) release() {
	a.mu.Lock()
	gate := a.gate
	a.mu.Unlock()
	if gate != nil {
		a.relOnce.Do(func() { close(gate) })
	}
}

// wait holds l's Apply on node while the lag is armed for it.
func (a *applyLag) wait(node string, l *raft.Log) {
	a.mu.Lock()
	gate, held := a.gate, a.held
	hold := gate != nil && node == a.node && l.Type == raft.LogCommand && string(l.Data) == a.cmd
	a.mu.Unlock()
	if !hold {
		return
	}
	a.heldOnce.Do(func() { close(held) })
	<-gate
}

// laggingFSM is a node's testFSM behind an applyLag, with its own applied
// index (ControlConfig.AppliedIndex) as node/'s ledger reports it: the
// last entry it applied.
type laggingFSM struct {
	*testFSM
	id      string
	lag     *applyLag
	applied atomic.Uint64
}

func (f *laggingFSM) Apply(l *raft.Log) any {
	f.lag.wait(f.id, l)
	r := f.testFSM.Apply(l)
	f.applied.Store(max(f.applied.Load(), l.Index))
	return r
}

// ownerWordJudge stands in for node/'s OwnerWord and Words hooks: the
// leader keeps a told word (cmd, the name of the command it refers to)
// for wordTarget only when its replica shows that command applied — as
// node/ keeps a Transfer only when its replica shows the shard Revoking
// toward its target — and a target's ask returns the words kept.
type ownerWordJudge struct {
	mu     sync.Mutex
	judged []wordJudgement
	kept   []string
}

type wordJudgement struct {
	at   string
	word string
	kept bool
}

const wordTarget = "n9"

func (j *ownerWordJudge) all() []wordJudgement {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.judged)
}

// ownerWordHarness starts three voters whose FSMs lag where lag says, with
// the judge as their OwnerWord and Words hooks.
func ownerWordHarness(t *testing.T) (*harness, *applyLag, *ownerWordJudge) {
	h := newMemHarness(t, 28)
	lag, judge := &applyLag{}, &ownerWordJudge{}
	h.cfg = func(c *ControlConfig) {
		c.BootstrapExpect, c.MaxVoters = 3, 3
		id := c.NodeID
		fsm := &laggingFSM{testFSM: c.FSM.(*testFSM), id: id, lag: lag}
		c.FSM, c.AppliedIndex = fsm, fsm.applied.Load
		c.OwnerWord = func(_ Peer, _ bool, cmd []byte) {
			kept := slices.Contains(fsm.entries(), string(cmd))
			judge.mu.Lock()
			defer judge.mu.Unlock()
			judge.judged = append(judge.judged, wordJudgement{id, string(cmd), kept})
			if kept {
				judge.kept = append(judge.kept, string(cmd))
			}
		}
		c.NoWords = []byte("[]")
		c.Words = func(_ context.Context, node string) ([]byte, error) {
			judge.mu.Lock()
			defer judge.mu.Unlock()
			if node != wordTarget || len(judge.kept) == 0 {
				return c.NoWords, nil
			}
			out := strings.Join(judge.kept, ",")
			judge.kept = nil
			return []byte(out), nil
		}
	}
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	return h, lag, judge
}

// leaderAndFollower waits for the three voters and a leader.
func leaderAndFollower(h *harness) (l, f *testNode) {
	h.waitConfig(10*time.Second, "n1:V n2:V n3:V")
	l = h.waitLeader(10 * time.Second)
	for _, n := range h.running() {
		if n != l {
			return l, n
		}
	}
	h.t.Fatal("no follower")
	return nil, nil
}

// revokeLagging commits "revoke" through f while l's FSM holds its Apply,
// and waits until f (the old owner) applied it: f may now tell its word,
// which l's replica cannot yet back. The returned channel yields the
// Apply's outcome once l's FSM applied it.
func revokeLagging(t *testing.T, lag *applyLag, l, f *testNode) <-chan error {
	t.Helper()
	lag.arm(l.id, "revoke")
	applied := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := f.g.Apply(ctx, []byte("revoke"))
		applied <- err
	}()
	waitFor(t, 10*time.Second, "the old owner's replica applied the revoke", func() bool {
		return slices.Contains(f.fsm.entries(), "revoke")
	})
	<-lag.held
	if slices.Contains(l.fsm.entries(), "revoke") {
		t.Fatal("the leader's FSM applied the revoke while its Apply was held")
	}
	return applied
}

// An old owner tells its word (Control.OwnerWord) once its own replica
// applied the Revoke, while the leader's FSM has not yet applied it (Raft
// committed it and handed it over): the leader waits for its FSM before it
// judges the word, so it keeps the word and the target's ask carries it.
// Judged at once (owner-word-no-apply-wait), the replica shows no Revoke
// and the word is dropped.
func TestOwnerWordWaitsForLaggingReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, lag, judge := ownerWordHarness(t)
		defer h.closeAll()
		defer lag.release() // before closeAll: Raft's shutdown waits for the FSM
		l, f := leaderAndFollower(h)
		applied := revokeLagging(t, lag, l, f)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sent := make(chan error, 1)
		go func() { sent <- f.g.SendOwnerWord(ctx, []byte("revoke")) }()
		// Every goroutine blocked at this instant: the word has reached
		// the leader, whose FSM still holds the Revoke.
		synctest.Wait()
		if j := judge.all(); len(j) != 0 {
			t.Fatalf("the leader judged the word %+v before its FSM applied the revoke", j)
		}
		released := time.Now()
		lag.release()
		if err := <-sent; err != nil {
			t.Fatalf("SendOwnerWord: %v", err)
		}
		if took := time.Since(released); took > time.Second {
			t.Errorf("the word was judged %v after the leader's FSM caught up", took)
		}
		if j := judge.all(); len(j) != 1 || j[0] != (wordJudgement{at: l.id, word: "revoke", kept: true}) {
			t.Fatalf("judged %+v; want the word kept once at the leader %s", j, l.id)
		}
		if err := <-applied; err != nil {
			t.Fatalf("apply revoke: %v", err)
		}
		data, err := l.g.Words(ctx, wordTarget)
		if err != nil || string(data) != "revoke" {
			t.Fatalf("the target's ask = %q, %v; want the word relayed", data, err)
		}
	})
}

// The wait is bounded: a leader whose FSM never applies what was committed
// when the word arrived (a halted replica) refuses the word unjudged after
// RPCTimeout, and the sender gets ErrTimeout naming the indexes — not a
// hang, and not a word judged against a replica that cannot back it.
func TestOwnerWordRefusedWhenReplicaNeverCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, lag, judge := ownerWordHarness(t)
		defer h.closeAll()
		defer lag.release()
		l, f := leaderAndFollower(h)
		applied := revokeLagging(t, lag, l, f)

		timeout := l.g.cfg.RPCTimeout
		ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
		defer cancel()
		start := time.Now()
		err := f.g.SendOwnerWord(ctx, []byte("revoke"))
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "word not taken") {
			t.Errorf("SendOwnerWord to a leader whose replica never catches up = %v; want ErrTimeout, word not taken", err)
		}
		if took < timeout || took > timeout+time.Second {
			t.Errorf("SendOwnerWord returned after %v; want RPCTimeout %v (bounded wait)", took, timeout)
		}
		if j := judge.all(); len(j) != 0 {
			t.Errorf("the leader judged %+v on a replica that never applied the revoke", j)
		}
		lag.release()
		if err := <-applied; err != nil {
			t.Fatalf("apply revoke: %v", err)
		}
	})
}
