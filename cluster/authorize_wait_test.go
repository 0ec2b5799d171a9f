package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// memAuthenticator proves a peer on the in-memory network by the address
// its connection comes from (the listener address of the node that
// dialled, or the node dialled): an authenticated cluster without TLS, for
// tests of what the leader does with the proven peer.
type memAuthenticator struct {
	mu  sync.Mutex
	ids map[string]string // address → node id
}

func (a *memAuthenticator) add(addr, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string]string{}
	}
	a.ids[addr] = id
}

func (a *memAuthenticator) authenticate(_ context.Context, c net.Conn) (Peer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[c.RemoteAddr().String()]
	if !ok {
		return Peer{}, fmt.Errorf("no node at %s", c.RemoteAddr())
	}
	return Peer{ID: id, Role: RoleNode}, nil
}

// grantCmd and releaseCmd stand in for the ledger's grant of a shard to a
// node and that node's Release of it.
func grantCmd(id string) string   { return "grant:" + id }
func releaseCmd(id string) string { return "release:" + id }

// authorizeHarness starts three voters on the in-memory network,
// authenticated by memAuthenticator, whose FSMs lag where the returned
// applyLag says. Each one's Authorize judges a forwarded command against
// its own replica, as node/'s does against the ledger: a node may release
// only its own grant, and only one its replica shows applied.
func authorizeHarness(t *testing.T) (*harness, *applyLag) {
	h := newMemHarness(t, 24)
	lag, auth := &applyLag{}, &memAuthenticator{}
	h.cfg = func(c *ControlConfig) {
		c.BootstrapExpect, c.MaxVoters = 3, 3
		id := c.NodeID
		auth.add(c.StreamLayer.Addr().String(), id)
		fsm := &laggingFSM{testFSM: c.FSM.(*testFSM), id: id, lag: lag}
		c.FSM, c.AppliedIndex = fsm, fsm.applied.Load
		c.Authenticate = auth.authenticate
		c.Authorize = func(p Peer, cmd []byte) error {
			node, ok := strings.CutPrefix(string(cmd), "release:")
			switch {
			case !ok:
				return nil
			case node != p.ID:
				return fmt.Errorf("%s may release only its own grant, not %q's", p, node)
			case !slices.Contains(fsm.entries(), grantCmd(node)):
				return fmt.Errorf("%s holds no grant in %s's replica", p, id)
			}
			return nil
		}
	}
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	return h, lag
}

// grantLagging commits f's grant through the leader l while l's FSM holds
// its Apply, and waits until f's replica applied it: f may now release
// the shard, which l's replica cannot yet back. The returned channel
// yields the grant's Apply outcome once l's FSM applied it.
func grantLagging(t *testing.T, lag *applyLag, l, f *testNode) <-chan error {
	t.Helper()
	grant := grantCmd(f.id)
	lag.arm(l.id, grant)
	applied := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := l.g.Apply(ctx, []byte(grant))
		applied <- err
	}()
	waitFor(t, 10*time.Second, "the member's replica applied its grant", func() bool {
		return slices.Contains(f.fsm.entries(), grant)
	})
	<-lag.held
	if slices.Contains(l.fsm.entries(), grant) {
		t.Fatal("the leader's FSM applied the grant while its Apply was held")
	}
	return applied
}

// A member forwards a command (Control.Apply) that only an entry already
// committed backs — the Release of a shard its own replica shows granted —
// while the leader's FSM has not yet applied that entry (Raft committed it
// and handed it over, so Raft's applied index covers it). The leader waits
// for its FSM before Authorize judges the command, so the command is
// authorized and applied once the FSM catches up. Judged on Raft's applied
// index (authorize-raft-applied), the leader's ledger shows no grant and
// the member's legitimate command is refused as unauthorized.
func TestAuthorizeWaitsForLaggingFSM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, lag := authorizeHarness(t)
		defer h.closeAll()
		defer lag.release() // before closeAll: Raft's shutdown waits for the FSM
		l, f := leaderAndFollower(h)
		granted := grantLagging(t, lag, l, f)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		release := releaseCmd(f.id)
		sent := make(chan error, 1)
		go func() {
			_, err := f.g.Apply(ctx, []byte(release))
			sent <- err
		}()
		// Every goroutine blocked at this instant: the forwarded release
		// has reached the leader, whose FSM still holds the grant.
		synctest.Wait()
		select {
		case err := <-sent:
			t.Fatalf("the leader answered the forwarded release before its FSM applied the grant: %v", err)
		default:
		}
		if slices.Contains(l.fsm.entries(), release) {
			t.Fatal("the leader applied the release before the grant")
		}
		lag.release()
		if err := <-sent; err != nil {
			t.Fatalf("forwarded release of the member's own grant: %v", err)
		}
		if err := <-granted; err != nil {
			t.Fatalf("apply grant: %v", err)
		}
		got := l.fsm.entries()
		if g, r := slices.Index(got, grantCmd(f.id)), slices.Index(got, release); g < 0 || r < g {
			t.Fatalf("leader's replica %q; want the grant, then the release", got)
		}
	})
}

// The wait is bounded: a leader whose FSM does not apply what was
// committed when a forwarded command arrived refuses it unjudged after the
// request's timeout — ErrTimeout naming both indexes, not a hang, and not
// ErrUnauthorized from a ledger that cannot back it — and proposes
// nothing.
func TestAuthorizeRefusedWhenFSMNeverCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, lag := authorizeHarness(t)
		defer h.closeAll()
		defer lag.release()
		l, f := leaderAndFollower(h)
		granted := grantLagging(t, lag, l, f)

		// The leader's receiver of a connection proven to be f, as the
		// mux builds it, so the request's timeout is the leader's alone.
		rpcAs := &controlRPC{g: l.g, peer: Peer{ID: f.id, Role: RoleNode}, authenticated: true}
		const timeout = 2 * time.Second
		release := releaseCmd(f.id)
		start := time.Now()
		var reply wire.ApplyReply
		if err := rpcAs.Apply(&wire.ApplyArgs{Cmd: []byte(release), Timeout: timeout}, &reply); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if reply.Code != wire.CodeTimeout || !strings.Contains(reply.Msg, "not judged") {
			t.Errorf("forwarded release on a leader whose FSM never catches up = %d %q; want CodeTimeout, not judged", reply.Code, reply.Msg)
		}
		if _, err := applyResult(reply, l.addr); !errors.Is(err, ErrTimeout) {
			t.Errorf("the sender would see %v; want ErrTimeout", err)
		}
		if took < timeout || took > timeout+time.Second {
			t.Errorf("the refusal came after %v; want the request's timeout %v (bounded wait)", took, timeout)
		}
		lag.release()
		if err := <-granted; err != nil {
			t.Fatalf("apply grant: %v", err)
		}
		if slices.Contains(l.fsm.entries(), release) {
			t.Fatal("the leader proposed a command it did not judge")
		}
	})
}

// A cluster whose log holds no command yet (bootstrap configuration, the
// leader's no-op, voters added): a member's first forwarded command has
// nothing for the leader's FSM to wait for. It is judged and applied at
// once, not held until the request times out waiting for an index the
// FSM never applies (entries it never sees).
func TestAuthorizeFirstCommandOfFreshCluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := authorizeHarness(t)
		defer h.closeAll()
		l, f := leaderAndFollower(h)
		if got := l.fsm.entries(); len(got) != 0 {
			t.Fatalf("leader's replica %q; want no command yet", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if _, err := f.g.Apply(ctx, []byte("hello")); err != nil {
			t.Fatalf("a member's first forwarded command: %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("a member's first forwarded command took %v; want it judged at once", took)
		}
	})
}

// fsmWaitIndex: the last command at or below commit; 0 when the log holds
// no command down to its start (none committed yet, or the rest compacted
// into a snapshot the FSM applied); commit when the read-back finds no
// command within renewScan entries.
func TestFSMWaitIndex(t *testing.T) {
	entries := func(first uint64, types ...raft.LogType) raft.LogStore {
		s := raft.NewInmemStore()
		for i, typ := range types {
			if err := s.StoreLog(&raft.Log{Index: first + uint64(i), Term: 1, Type: typ}); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	conf, noop, cmd := raft.LogConfiguration, raft.LogNoop, raft.LogCommand
	many := make([]raft.LogType, renewScan+1)
	many[0] = cmd
	for i := 1; i < len(many); i++ {
		many[i] = conf
	}
	for _, c := range []struct {
		name   string
		store  raft.LogStore
		commit uint64
		want   uint64
	}{
		{"fresh cluster, no command", entries(1, conf, noop, conf, conf), 4, 0},
		{"last command below no-ops", entries(1, conf, noop, cmd, noop, conf), 5, 3},
		{"command past commit ignored", entries(1, conf, cmd, noop, cmd), 3, 2},
		{"compacted, no command since", entries(10, noop, conf), 11, 0},
		{"nothing committed", entries(1), 0, 0},
		{"no command within the read-back", entries(1, many...), uint64(len(many)), uint64(len(many))},
	} {
		if got := fsmWaitIndex(c.store, c.commit); got != c.want {
			t.Errorf("%s: fsmWaitIndex(%d) = %d, want %d", c.name, c.commit, got, c.want)
		}
	}
}
