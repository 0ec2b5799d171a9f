package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// counterSM is a test application state machine: per shard it keeps the
// payloads applied, in order. Payload "fail" makes Apply return an error.
type counterSM struct {
	logs map[uint32][]string
}

func newCounterSM() *counterSM { return &counterSM{logs: map[uint32][]string{}} }

func (c *counterSM) Apply(shard uint32, epoch, index uint64, payload []byte) ([]byte, error) {
	if string(payload) == "fail" {
		return nil, errors.New("counter refuses fail")
	}
	c.logs[shard] = append(c.logs[shard], fmt.Sprintf("%s@%d", payload, epoch))
	return []byte(fmt.Sprintf("n=%d", len(c.logs[shard]))), nil
}

func (c *counterSM) Snapshot() ([]byte, error) {
	w := &writer{}
	shards := make([]uint32, 0, len(c.logs))
	for s := range c.logs {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	w.u(uint64(len(shards)))
	for _, s := range shards {
		w.u(uint64(s))
		w.u(uint64(len(c.logs[s])))
		for _, e := range c.logs[s] {
			w.str(e)
		}
	}
	return w.b, nil
}

func (c *counterSM) Restore(b []byte) error {
	c.logs = map[uint32][]string{}
	if b == nil {
		return nil
	}
	r := &reader{b: b}
	for n := r.u(); n > 0 && r.err == nil; n-- {
		s := r.u32()
		for m := r.u(); m > 0 && r.err == nil; m-- {
			c.logs[s] = append(c.logs[s], r.str())
		}
	}
	return r.err
}

func fmtShard(r ShardRecord) string {
	s := fmt.Sprintf("shard=%d epoch=%d owner=%s/%d/%d state=%s", r.Shard, r.Epoch, r.Owner, r.OwnerIncarnation, r.OwnerLiveness, r.State)
	if r.Target != "" {
		s += " target=" + r.Target
	}
	if r.Reason != "" {
		s += " reason=" + r.Reason
	}
	if r.AvoidOwner != "" {
		s += " avoid=" + r.AvoidOwner
	}
	return s
}

func fmtElection(e ElectionRecord) string {
	return fmt.Sprintf("election=%s/%s shard=%d", e.Group, e.Name, e.Shard)
}

func fmtNode(n NodeRecord) string {
	return fmt.Sprintf("node=%s inc=%d live=%d seq=%d draining=%v", n.ID, n.Incarnation, n.Liveness, n.Seq, n.Draining)
}

func fmtJob(j JobRecord) string {
	s := fmt.Sprintf("job=%d shard=%d state=%s attempt=%d/%d", j.ID, j.Shard, j.State, j.Attempt, j.MaxAttempts)
	if j.Key != "" {
		s += " key=" + j.Key
	}
	if j.Attempt > 0 {
		s += fmt.Sprintf(" owner=%s epoch=%d token=%s", j.Owner, j.Epoch, j.Token())
	}
	if j.NotBefore != j.EnqueuedAt && j.State == JobPending {
		s += fmt.Sprintf(" notbefore=%d", j.NotBefore)
	}
	if j.LastError != "" {
		s += fmt.Sprintf(" lasterr=%q", j.LastError)
	}
	if len(j.Result) > 0 {
		s += fmt.Sprintf(" result=%q", j.Result)
	}
	return s
}

func fmtResult(c Command, r Result) string {
	var b strings.Builder
	if r.Err != nil {
		b.WriteString("err: " + r.Err.Error())
	} else {
		b.WriteString("ok")
	}
	switch c.(type) {
	case Heartbeat, ExpireNode, SetDraining:
		if r.Node.ID != "" {
			b.WriteString("\n  " + fmtNode(r.Node))
		}
	case Grant, Revoke, Release, Transfer:
		b.WriteString("\n  " + fmtShard(r.Shard))
	case JobEnqueue, JobStart, JobComplete, JobFail:
		if r.Job.ID != 0 {
			b.WriteString("\n  " + fmtJob(r.Job))
		}
		if r.Duplicate {
			b.WriteString(" (duplicate)")
		}
	case DeclareElection:
		if r.Election.Name != "" {
			b.WriteString("\n  " + fmtElection(r.Election))
		}
		if r.Duplicate {
			b.WriteString(" (duplicate)")
		}
	case PinShard, ExcludeNode, SetTakeoverPolicy:
		if r.Duplicate {
			b.WriteString(" (duplicate)")
		}
	case App:
		if r.Response != nil {
			b.WriteString(fmt.Sprintf("\n  response=%q", r.Response))
		}
	}
	return b.String()
}

// dumpState prints a State in a canonical form (sorted), used to compare
// replicas.
func dumpState(s *State) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "applied=%d nextjob=%d settings=%+v\n", s.applied, s.nextJob, s.settings)
	for _, r := range s.Shards() {
		fmt.Fprintf(&b, "%s changed=%d\n", fmtShard(r), r.ChangedAt)
	}
	for _, n := range s.Nodes() {
		fmt.Fprintf(&b, "%s at=%d\n", fmtNode(n), n.HeartbeatAt)
	}
	for _, j := range s.AllJobs() {
		fmt.Fprintf(&b, "%+v\n", j)
	}
	s.finished.Ascend(func(k finishedKey) bool { fmt.Fprintf(&b, "finished %d:%d\n", k.seq, k.id); return true })
	s.keyIdx.Ascend(func(k jobKeyKey) bool { fmt.Fprintf(&b, "key %d/%q=%d\n", k.shard, k.key, k.id); return true })
	s.jobIdx.Ascend(func(k jobIndexKey) bool { fmt.Fprintf(&b, "idx %d/%s/%d\n", k.shard, k.state, k.id); return true })
	fmt.Fprintf(&b, "partitions=%d\n", s.partitions)
	for _, e := range s.Elections() {
		fmt.Fprintf(&b, "%s at=%d\n", fmtElection(e), e.DeclaredAt)
	}
	fmt.Fprintf(&b, "sessionseq=%d\n", s.sessionSeq)
	s.sessionOrder.Ascend(func(o sessionOrder) bool {
		e, _ := s.sessions.Get(sessionEntry{id: o.id})
		fmt.Fprintf(&b, "session %d %s now=%d %s/%d dup=%v err=%v job=%d resp=%q\n", e.seq, e.id, e.now, e.kind, e.shard,
			e.res.Duplicate, e.res.Err, e.res.Job.ID, e.res.Response)
		return true
	})
	return b.String()
}
