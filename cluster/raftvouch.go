package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// The vouch round closes the one gap the Raft guard's voter check opens
// (raftguard.go): a node that missed the configuration entry that made a
// new voter — a follower that lagged, a standby that was down while the
// voters changed — would refuse that voter's log for as long as it leads,
// since the entry that would name it a voter arrives only in that log.
//
// When the guard refuses log at a term not below this node's from an id it
// cannot place, it asks the voters of its own latest configuration
// (Control.Status over the authenticated RPC path, each answer from the
// server gossip and its certificate place at that voter's address) whom
// they follow. If one of them — not the sender — follows that id at that
// very term, the id is recorded as that term's leader (raftGuard.vouch)
// and its log passes from then on; the configuration entries in it make
// the id a voter in this node's eyes. Voters are trusted (docs/security.md,
// "Roles"): a voter that follows X at term T accepted X's log at T, which
// its own guard let through only from a voter it knows. A non-voter's or a
// member's certificate cannot get a voter to say so.
//
// At most one round runs at a time, at most one a second; a request
// arriving meanwhile is dropped (the leader keeps sending, so it comes
// again).

const (
	// vouchEvery bounds the rounds to one a second.
	vouchEvery = time.Second
	// vouchTimeout bounds one round's Status calls.
	vouchTimeout = 2 * time.Second
)

type vouchRequest struct {
	id   string
	term uint64
}

// requestVouch is the guard's raftView.unknownLeader: it never blocks.
func (g *ControlGroup) requestVouch(id string, term uint64) {
	select {
	case g.vouchReq <- vouchRequest{id, term}:
	default:
	}
}

// vouchLoop serves requestVouch.
func (g *ControlGroup) vouchLoop() {
	var last time.Time
	for {
		var req vouchRequest
		select {
		case req = <-g.vouchReq:
		case <-g.closing:
			return
		}
		if time.Since(last) < vouchEvery {
			continue
		}
		last = time.Now()
		by, ok := g.askVoters(req)
		if ok && g.mux.guard.vouch(req.id, req.term) {
			g.log.Info("cluster: accepting log from a leader this node's configuration does not list yet, on a voter's word",
				"leader", req.id, "term", req.term, "vouched_by", by)
		}
	}
}

// askVoters asks the voters of this node's latest configuration, other
// than itself and req.id, whom they follow; ok when one follows req.id at
// req.term.
func (g *ControlGroup) askVoters(req vouchRequest) (by string, ok bool) {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), vouchTimeout)
	defer cancel()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == g.cfg.NodeID || string(s.ID) == req.id {
			continue
		}
		wg.Add(1)
		go func(s raft.Server) {
			defer wg.Done()
			var st wire.StatusReply
			if err := g.pool.call(ctx, string(s.Address), "Control.Status", &wire.StatusArgs{}, &st); err != nil {
				return
			}
			if st.ID != string(s.ID) || st.Leader != req.id || st.Term != req.term {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				by, ok = st.ID, true
				close(done)
			}
		}(s)
	}
	go func() { wg.Wait(); cancel() }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	return by, ok
}
