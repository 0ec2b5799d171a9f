package cluster

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	wire "github.com/tenurehq/tenure/cluster/internal/rpcwire"
)

// The vouch round closes the one gap the Raft guard's voter check opens
// (identity/raftguard.go): a node that missed the configuration entry that made a
// new voter — a follower that lagged, a standby that was down while the
// voters changed — would refuse that voter's log for as long as it leads,
// since the entry that would name it a voter arrives only in that log.
//
// When the guard refuses log at a term not below this node's from an id it
// cannot place, it asks the voters of its own latest configuration
// (Control.Status over the authenticated RPC path, each answer from the
// server gossip and its certificate place at that voter's address) whom
// they follow. If more than half of those that answer — never the sender —
// follow that id at that very term, the id is recorded as that term's
// leader (identity.Guard.Vouch) and its log passes from then on; the
// configuration entries in it make the id a voter in this node's eyes.
// Voters are trusted (docs/security.md, "Roles"): a voter that follows X
// at term T accepted X's log at T, which its own guard let through only
// from a voter it knows. A non-voter's or a member's certificate cannot
// get an up-to-date voter to say so; a majority of the answers, not one,
// keeps a stale voter (one that still lists a since-demoted server as a
// voter) from vouching an up-to-date one into following that server.
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

// requestVouch is the guard's RaftView.UnknownLeader: it never blocks.
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
		if !ok {
			g.log.Debug("cluster: no voter vouched for an unknown leader", "leader", req.id, "term", req.term, "vouched_by", by)
			continue
		}
		if g.mux.Guard().Vouch(req.id, req.term) {
			g.log.Info("cluster: accepting log from a leader this node's configuration does not list yet, on the word of the voters it knows",
				"leader", req.id, "term", req.term, "vouched_by", by)
		}
	}
}

// askVoters asks the voters of this node's latest configuration, other
// than itself and req.id, whom they follow; ok when more than half of
// those that answer follow req.id at req.term. Not one: a voter that was
// down while the configuration changed (as this node was) may still list a
// since-demoted server as a voter and follow it, and one such word must
// not carry an up-to-date voter along.
func (g *ControlGroup) askVoters(req vouchRequest) (by []string, ok bool) {
	conf, err := g.latestConfiguration()
	if err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), vouchTimeout)
	defer cancel()
	go func() {
		select {
		case <-g.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		answers []wire.StatusReply
	)
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == g.cfg.NodeID || string(s.ID) == req.id {
			continue
		}
		wg.Add(1)
		go func(s raft.Server) {
			defer wg.Done()
			var st wire.StatusReply
			if err := g.pool.call(ctx, string(s.Address), "Control.Status", &wire.StatusArgs{}, &st); err != nil || st.ID != string(s.ID) {
				return
			}
			mu.Lock()
			answers = append(answers, st)
			mu.Unlock()
		}(s)
	}
	wg.Wait()
	return vouched(req, answers)
}

// vouched decides a vouch round from the voters' answers (each from the
// voter it names, never from req.id): more than half follow req.id at
// req.term. by lists those that do, sorted.
func vouched(req vouchRequest, answers []wire.StatusReply) (by []string, ok bool) {
	for _, st := range answers {
		if st.ID != req.id && st.Leader == req.id && st.Term == req.term {
			by = append(by, st.ID)
		}
	}
	sort.Strings(by)
	return by, len(by) > 0 && 2*len(by) > len(answers)
}
