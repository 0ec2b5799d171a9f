package simulation

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
	"github.com/tenurehq/tenure/ring"
)

// checker holds the invariant checkers. Safety (S1–S4) is checked on every
// commit and every acting change; liveness (L1–L3) once faults have stopped.
type checker struct {
	s *Sim
	// owners[shard][epoch] is the owner committed at that epoch (S1).
	owners map[uint32]map[uint64]string
	// completed jobs (S2: never completed twice).
	completed map[uint64]bool
	// acked[index] is the command a proposer was told committed there (S3).
	acked map[uint64]string
	// lastStop[shard] is when the last node stopped acting on it (L3).
	lastStop map[uint32]int64
	// planned[shard]: a planned move (Revoke) is in progress.
	planned map[uint32]bool
	gapInfo string
}

type preCommit struct {
	shard    ledger.ShardRecord
	hasShard bool
	fenced   bool // the command is fenced by Epoch (or ExpectedEpoch)
	epoch    uint64
	job      ledger.JobRecord
	hasJob   bool
}

func newChecker(s *Sim) *checker {
	return &checker{s: s, owners: map[uint32]map[uint64]string{}, completed: map[uint64]bool{},
		acked: map[uint64]string{}, lastStop: map[uint32]int64{}, planned: map[uint32]bool{}}
}

// fence returns the shard and epoch a command is fenced by.
func fence(c ledger.Command) (shard uint32, epoch uint64, ok bool) {
	switch c := c.(type) {
	case ledger.Grant:
		return c.Shard, c.ExpectedEpoch, true
	case ledger.Revoke:
		return c.Shard, c.Epoch, true
	case ledger.Release:
		return c.Shard, c.Epoch, true
	case ledger.Transfer:
		return c.Shard, c.Epoch, true
	case ledger.JobStart:
		return c.Shard, c.Epoch, true
	case ledger.JobComplete:
		return c.Shard, c.Epoch, true
	case ledger.JobFail:
		return c.Shard, c.Epoch, true
	case ledger.App:
		return c.Shard, c.Epoch, true
	}
	return 0, 0, false
}

func (c *checker) beforeCommit(cmd ledger.Command) preCommit {
	st := c.s.raft.ref.State()
	var p preCommit
	if sh, ep, ok := fence(cmd); ok {
		p.fenced, p.epoch = true, ep
		p.shard, p.hasShard = st.Shard(sh)
		p.shard.Shard = sh
	}
	var job uint64
	switch cmd := cmd.(type) {
	case ledger.JobStart:
		job = cmd.Job
	case ledger.JobComplete:
		job = cmd.Job
	case ledger.JobFail:
		job = cmd.Job
	}
	if job != 0 {
		p.job, p.hasJob = st.Job(job)
	}
	return p
}

func (c *checker) afterCommit(index uint64, cmd ledger.Command, res ledger.Result, pre preCommit) {
	s := c.s
	if res.Err != nil || !pre.fenced {
		return
	}
	name := ownership.FormatCommand(cmd)
	// S2: a fenced command is accepted only at the shard's current epoch.
	if pre.epoch != pre.shard.Epoch {
		s.violate("S2", "#%d %s accepted at stale epoch %d (shard at epoch %d)", index, name, pre.epoch, pre.shard.Epoch)
	}
	after, _ := s.raft.ref.State().Shard(pre.shard.Shard)
	// S1: epochs only increase, by one per ownership change, one owner each.
	switch {
	case after.Epoch < pre.shard.Epoch:
		s.violate("S1", "#%d %s: shard %d epoch went back %d -> %d", index, name, after.Shard, pre.shard.Epoch, after.Epoch)
	case after.Epoch > pre.shard.Epoch+1:
		s.violate("S1", "#%d %s: shard %d epoch jumped %d -> %d", index, name, after.Shard, pre.shard.Epoch, after.Epoch)
	}
	if after.State != ledger.ShardUnowned {
		m := c.owners[after.Shard]
		if m == nil {
			m = map[uint64]string{}
			c.owners[after.Shard] = m
		}
		if o, ok := m[after.Epoch]; ok && o != after.Owner {
			s.violate("S1", "#%d %s: shard %d epoch %d owned by %s and %s", index, name, after.Shard, after.Epoch, o, after.Owner)
		}
		m[after.Epoch] = after.Owner
	}
	switch cmd := cmd.(type) {
	case ledger.JobStart:
		if cmd.Owner != pre.shard.Owner {
			s.violate("S2", "#%d job %d started by %s, shard %d owner at epoch %d is %s", index, cmd.Job, cmd.Owner, cmd.Shard, cmd.Epoch, pre.shard.Owner)
		}
	case ledger.JobComplete:
		if c.completed[cmd.Job] {
			s.violate("S2", "#%d job %d completed twice", index, cmd.Job)
		}
		c.completed[cmd.Job] = true
	case ledger.Revoke:
		c.planned[cmd.Shard] = true
	case ledger.Grant:
		c.planned[cmd.Shard] = false
	}
}

// acked records that a proposer was told cmd committed at index (S3).
func (c *checker) ack(index uint64, cmd ledger.Command) {
	c.acked[index] = ownership.FormatCommand(cmd)
}

// startedActing checks S4 when n starts acting on shard: no other process
// may be acting on it at this true instant.
func (c *checker) startedActing(n *node, shard uint32, rec ledger.ShardRecord) {
	s := c.s
	for _, m := range s.nodes {
		if m == n || m.tracker == nil {
			continue
		}
		if m.tracker.Acting(shard, m.localTime(s.now)) {
			s.violate("S4", "%s starts acting on shard %d (epoch %d) while %s still acts (epoch %d)",
				n.id, shard, rec.Epoch, m.id, m.acting[shard])
		}
	}
	// L3 is judged once the cluster has settled after the faults stopped
	// (dead incarnations expired, restarted nodes stable in the ring).
	o := s.cfg.Ownership
	settled := int64(s.cfg.FaultsUntil) + int64(float64(o.Lease)*(1+o.MaxDrift)+float64(o.StableFor)) + int64(time.Second)
	if t, ok := c.lastStop[shard]; ok && t >= settled {
		if gap := time.Duration(s.now - t); gap > s.res.MaxHandoffGap {
			s.res.MaxHandoffGap = gap
			c.gapInfo = fmt.Sprintf("shard %d to %s at %v", shard, n.id, time.Duration(s.now))
		}
	}
}

func (c *checker) stoppedActing(n *node, shard uint32, epoch uint64) {
	c.lastStop[shard] = c.s.now
}

// quietNeeded is how long after the faults stop the cluster needs to
// converge: an election, expiry of dead incarnations, hysteresis, a
// takeover, and rebalancing in waves of MaxMovesInFlight.
func quietNeeded(cfg Config) time.Duration {
	o := cfg.Ownership
	expire := time.Duration(float64(o.Lease) * (1 + o.MaxDrift))
	takeover := time.Duration(float64(o.Lease+o.DrainTimeout) * (1 + o.MaxDrift))
	waves := (o.Ring.Partitions + o.MaxMovesInFlight - 1) / o.MaxMovesInFlight
	return time.Second + expire + o.StableFor + takeover + time.Duration(waves)*(o.DrainTimeout+200*time.Millisecond)
}

// final runs the end-of-run checks.
func (c *checker) final() {
	s := c.s
	// S3: every acknowledged command is in the log at its index.
	idx := make([]uint64, 0, len(c.acked))
	for i := range c.acked {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		if i == 0 || i > uint64(len(s.raft.log)) || ownership.FormatCommand(s.raft.log[i-1].cmd) != c.acked[i] {
			s.violate("S3", "acknowledged #%d %s is not in the log", i, c.acked[i])
		}
	}
	// Replicas that applied the whole log agree with the reference.
	ref := s.raft.ref.State()
	for _, n := range s.nodes {
		if !n.up || n.applied != uint64(len(s.raft.log)) {
			continue
		}
		st := n.fsm.State()
		if !reflect.DeepEqual(st.Shards(), ref.Shards()) || !reflect.DeepEqual(st.Nodes(), ref.Nodes()) ||
			!reflect.DeepEqual(n.app.counts, s.nodes[s.refApp()].app.counts) {
			s.violate("replica", "%s's replica differs from the log's state", n.id)
		}
		for _, typ := range sortedTypes(s.cfg.StateMachines) {
			a, errA := n.user[typ].Snapshot()
			b, errB := s.nodes[s.refApp()].user[typ].Snapshot()
			if errA != nil || errB != nil || string(a) != string(b) {
				s.violate("replica", "%s's %s state machine differs from %s's", n.id, typ, s.nodes[s.refApp()].id)
			}
		}
	}
	if s.cfg.Duration-s.cfg.FaultsUntil < quietNeeded(s.cfg) {
		return // not quiet long enough to judge liveness
	}
	// L1: every shard has exactly one acting owner, the committed one.
	parts := s.cfg.Ownership.Ring.Partitions
	var eligible []string
	for _, n := range s.nodes {
		if n.up {
			eligible = append(eligible, n.id)
		}
	}
	slices.Sort(eligible)
	rg, err := ring.New(s.cfg.Ownership.Ring, eligible)
	if err != nil {
		s.violate("L2", "ring over %v: %v", eligible, err)
		return
	}
	for sh := range uint32(parts) {
		rec, _ := ref.Shard(sh)
		var acting []string
		for _, n := range s.nodes {
			if n.tracker != nil && n.tracker.Acting(sh, n.localTime(s.now)) {
				acting = append(acting, n.id)
			}
		}
		if len(acting) != 1 || acting[0] != rec.Owner {
			s.violate("L1", "shard %d: acting %v, committed owner %s (%s, epoch %d) %v after faults stopped",
				sh, acting, rec.Owner, rec.State, rec.Epoch, s.cfg.Duration-s.cfg.FaultsUntil)
			continue
		}
		// L2: placement converged to the ring over the eligible nodes.
		if want := rg.Owner(sh); rec.Owner != want {
			s.violate("L2", "shard %d owned by %s, ring proposes %s", sh, rec.Owner, want)
		}
	}
	// L3: planned moves after the faults stopped handed over with a gap of
	// at most the drain timeout plus a few commits and a planner round.
	if limit := s.cfg.Ownership.DrainTimeout + 500*time.Millisecond; s.res.MaxHandoffGap > limit {
		s.violate("L3", "a handoff after the faults stopped left a shard unowned for %v (limit %v): %s", s.res.MaxHandoffGap, limit, c.gapInfo)
	}
}

// refApp returns the index of a node whose app state is complete (for the
// replica comparison); the first node that applied the whole log.
func (s *Sim) refApp() int {
	for _, n := range s.nodes {
		if n.up && n.applied == uint64(len(s.raft.log)) {
			return n.idx
		}
	}
	return 0
}

func (c *checker) String() string { return fmt.Sprintf("checker: %d epochs", len(c.owners)) }
