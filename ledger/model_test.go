package ledger

import (
	"slices"
)

// model is a deliberately naive re-statement of the ledger's rules (maps,
// linear scans, no indexes), written from docs/ledger.md's command table.
// The property test checks the FSM gives the same answers.
type model struct {
	nodes    map[string]NodeRecord
	shards   map[uint32]ShardRecord
	jobs     map[uint64]JobRecord
	finished []uint64 // finished job ids in finishing order
	nextJob  uint64
	settings LedgerSettings
	maxPay   int
	appLog   map[uint32][]string
	// elections in declaration order; partitions from the first.
	elections  []ElectionRecord
	partitions uint32
}

func newModel(cfg Config) *model {
	return &model{nodes: map[string]NodeRecord{}, shards: map[uint32]ShardRecord{}, jobs: map[uint64]JobRecord{},
		settings: cfg.Settings(), maxPay: cfg.MaxPayload, appLog: map[uint32][]string{}}
}

func (m *model) valid(r ShardRecord) bool {
	n, ok := m.nodes[r.Owner]
	return (r.State == ShardOwned || r.State == ShardRevoking) && ok &&
		n.Incarnation == r.OwnerIncarnation && n.Liveness == r.OwnerLiveness
}

func (m *model) shard(id uint32) ShardRecord {
	if r, ok := m.shards[id]; ok {
		return r
	}
	return ShardRecord{Shard: id}
}

func (m *model) nodeMatches(id string, inc, live uint64) error {
	n, ok := m.nodes[id]
	if !ok {
		return ErrUnknownNode
	}
	if n.Incarnation != inc {
		return ErrStaleIncarnation
	}
	if n.Liveness != live {
		return ErrStaleLiveness
	}
	return nil
}

func (m *model) finish(id uint64) { m.finished = append(m.finished, id) }

func (m *model) prune(now int64) {
	for len(m.finished) > 0 {
		j := m.jobs[m.finished[0]]
		old := now >= j.FinishedAt && uint64(now)-uint64(j.FinishedAt) >= uint64(m.settings.JobRetention)
		if len(m.finished) <= int(m.settings.MaxFinishedJobs) && !old {
			return
		}
		delete(m.jobs, m.finished[0])
		m.finished = m.finished[1:]
	}
}

// apply returns the error sentinel (nil on success) and the result.
func (m *model) apply(c Command) Result {
	switch c := c.(type) {
	case Heartbeat:
		if c.Node == "" {
			return Result{Err: ErrInvalid}
		}
		n, ok := m.nodes[c.Node]
		if !ok {
			n = NodeRecord{ID: c.Node, Incarnation: c.Incarnation, Liveness: 1, Seq: 1, HeartbeatAt: c.Now}
		} else if c.Incarnation > n.Incarnation {
			n = NodeRecord{ID: c.Node, Incarnation: c.Incarnation, Liveness: n.Liveness + 1, Seq: n.Seq + 1, HeartbeatAt: c.Now}
		} else if c.Incarnation < n.Incarnation {
			return Result{Err: ErrStaleIncarnation, Node: n}
		} else if c.Liveness != 0 && c.Liveness != n.Liveness {
			return Result{Err: ErrStaleLiveness, Node: n}
		} else {
			n.Seq++
			n.HeartbeatAt = c.Now
		}
		m.nodes[c.Node] = n
		return Result{Node: n}
	case ExpireNode:
		n, ok := m.nodes[c.Node]
		if !ok {
			return Result{Err: ErrUnknownNode}
		}
		if n.Incarnation != c.Incarnation || n.Liveness != c.Liveness || n.Seq != c.Seq {
			return Result{Err: ErrConflict, Node: n}
		}
		n.Liveness++
		m.nodes[c.Node] = n
		return Result{Node: n}
	case SetDraining:
		n, ok := m.nodes[c.Node]
		if !ok {
			return Result{Err: ErrUnknownNode}
		}
		if n.Incarnation != c.Incarnation {
			return Result{Err: ErrStaleIncarnation, Node: n}
		}
		n.Draining = c.Draining
		m.nodes[c.Node] = n
		return Result{Node: n}
	case Grant:
		r := m.shard(c.Shard)
		if r.Epoch != c.ExpectedEpoch {
			return Result{Err: ErrStaleEpoch, Shard: r}
		}
		if c.Owner == "" {
			return Result{Err: ErrInvalid, Shard: r}
		}
		if m.valid(r) && !(c.Takeover && r.State == ShardRevoking) {
			return Result{Err: ErrShardOwned, Shard: r}
		}
		if err := m.nodeMatches(c.Owner, c.OwnerIncarnation, c.OwnerLiveness); err != nil {
			return Result{Err: err, Shard: r}
		}
		avoid := r.AvoidOwner
		if avoid == c.Owner {
			avoid = ""
		}
		r = ShardRecord{Shard: c.Shard, Epoch: r.Epoch + 1, Owner: c.Owner, OwnerIncarnation: c.OwnerIncarnation,
			OwnerLiveness: c.OwnerLiveness, State: ShardOwned, ChangedAt: c.Now, Reason: c.Reason, AvoidOwner: avoid}
		m.shards[c.Shard] = r
		return Result{Shard: r}
	case Revoke:
		r := m.shard(c.Shard)
		if r.Epoch != c.Epoch {
			return Result{Err: ErrStaleEpoch, Shard: r}
		}
		if r.State != ShardOwned {
			return Result{Err: ErrConflict, Shard: r}
		}
		r.State, r.Target, r.ChangedAt, r.Reason = ShardRevoking, c.Target, c.Now, c.Reason
		m.shards[c.Shard] = r
		return Result{Shard: r}
	case Release:
		r := m.shard(c.Shard)
		if r.Epoch != c.Epoch {
			return Result{Err: ErrStaleEpoch, Shard: r}
		}
		if r.Owner != c.Owner {
			return Result{Err: ErrNotOwner, Shard: r}
		}
		if r.State == ShardUnowned {
			return Result{Err: ErrConflict, Shard: r}
		}
		r.State, r.Target, r.ChangedAt, r.Reason, r.AvoidOwner = ShardUnowned, "", c.Now, "release", ""
		if c.Avoid {
			r.Reason, r.AvoidOwner = "resign", c.Owner
		}
		m.shards[c.Shard] = r
		return Result{Shard: r}
	case Transfer:
		r := m.shard(c.Shard)
		if r.Epoch != c.Epoch {
			return Result{Err: ErrStaleEpoch, Shard: r}
		}
		if r.Owner != c.From || !m.valid(r) {
			return Result{Err: ErrNotOwner, Shard: r}
		}
		if c.To == "" {
			return Result{Err: ErrInvalid, Shard: r}
		}
		if err := m.nodeMatches(c.To, c.ToIncarnation, c.ToLiveness); err != nil {
			return Result{Err: err, Shard: r}
		}
		r = ShardRecord{Shard: c.Shard, Epoch: r.Epoch + 1, Owner: c.To, OwnerIncarnation: c.ToIncarnation,
			OwnerLiveness: c.ToLiveness, State: ShardOwned, ChangedAt: c.Now, Reason: c.Reason}
		m.shards[c.Shard] = r
		return Result{Shard: r}
	case JobEnqueue:
		defer m.prune(c.Now)
		if len(c.Payload) > m.maxPay {
			return Result{Err: ErrTooLarge}
		}
		if c.Key != "" {
			for _, id := range m.sortedJobIDs() {
				if j := m.jobs[id]; j.Shard == c.Shard && j.Key == c.Key {
					return Result{Job: j, Duplicate: true}
				}
			}
		}
		if c.MaxPending > 0 {
			pending := 0
			for _, j := range m.jobs {
				if j.Shard == c.Shard && j.State == JobPending {
					pending++
				}
			}
			if pending >= int(c.MaxPending) {
				return Result{Err: ErrQueueFull}
			}
		}
		maxA := c.MaxAttempts
		if maxA == 0 {
			maxA = m.settings.DefaultMaxAttempts
		}
		m.nextJob++
		j := JobRecord{ID: m.nextJob, Shard: c.Shard, Key: c.Key, Type: c.Type, Payload: c.Payload, MaxAttempts: maxA,
			EnqueuedAt: c.Now, NotBefore: c.Now}
		m.jobs[j.ID] = j
		return Result{Job: j}
	case JobStart:
		defer m.prune(c.Now)
		if c.Timeout < 0 {
			return Result{Err: ErrInvalid}
		}
		j, ok := m.jobs[c.Job]
		if !ok || j.Shard != c.Shard {
			return Result{Err: ErrUnknownJob}
		}
		r := m.shard(c.Shard)
		switch {
		case r.Epoch != c.Epoch:
			return Result{Err: ErrStaleEpoch, Job: j, Shard: r}
		case r.Owner != c.Owner || !m.valid(r) || r.State != ShardOwned:
			return Result{Err: ErrNotOwner, Job: j, Shard: r}
		case j.State == JobCompleted || j.State == JobDead:
			return Result{Err: ErrJobFinished, Job: j}
		case c.Attempt != j.Attempt:
			return Result{Err: ErrWrongAttempt, Job: j}
		}
		if j.State == JobPending && c.Now < j.NotBefore {
			return Result{Err: ErrJobState, Job: j}
		}
		if j.State == JobStarted {
			timedOut := j.Timeout > 0 && c.Now > j.StartedAt && uint64(c.Now)-uint64(j.StartedAt) > uint64(j.Timeout)
			fenced := j.Epoch < r.Epoch
			if !timedOut && !fenced {
				return Result{Err: ErrJobState, Job: j}
			}
			if fenced {
				j.LastError = "attempt " + itoa(uint64(j.Attempt)) + " fenced out at epoch " + itoa(j.Epoch)
			} else {
				j.LastError = "attempt " + itoa(uint64(j.Attempt)) + " timed out"
			}
			if j.Attempt >= j.MaxAttempts {
				j.State, j.FinishedAt = JobDead, c.Now
				m.jobs[j.ID] = j
				m.finish(j.ID)
				return Result{Err: ErrJobFinished, Job: j}
			}
		}
		j.State, j.Attempt, j.Owner, j.Epoch, j.StartedAt, j.Timeout = JobStarted, j.Attempt+1, c.Owner, c.Epoch, c.Now, c.Timeout
		m.jobs[j.ID] = j
		return Result{Job: j}
	case JobComplete:
		defer m.prune(c.Now)
		if len(c.Result) > m.maxPay {
			return Result{Err: ErrTooLarge}
		}
		j, r := m.checkFinish(c.Shard, c.Epoch, c.Job, c.Attempt)
		if r.Err != nil {
			return r
		}
		j.State, j.FinishedAt, j.Result = JobCompleted, c.Now, c.Result
		m.jobs[j.ID] = j
		m.finish(j.ID)
		return Result{Job: j}
	case JobFail:
		defer m.prune(c.Now)
		if c.Backoff < 0 {
			return Result{Err: ErrInvalid}
		}
		j, r := m.checkFinish(c.Shard, c.Epoch, c.Job, c.Attempt)
		if r.Err != nil {
			return r
		}
		j.LastError = c.Error
		if j.Attempt >= j.MaxAttempts {
			j.State, j.FinishedAt = JobDead, c.Now
			m.finish(j.ID)
		} else {
			j.State, j.NotBefore = JobPending, satAdd(c.Now, c.Backoff)
		}
		m.jobs[j.ID] = j
		return Result{Job: j}
	case App:
		if c.Type != "counter" {
			return Result{Err: ErrUnknownType}
		}
		if len(c.Payload) > m.maxPay {
			return Result{Err: ErrTooLarge}
		}
		r := m.shard(c.Shard)
		if r.Epoch != c.Epoch {
			return Result{Err: ErrStaleEpoch, Shard: r}
		}
		if !m.valid(r) {
			return Result{Err: ErrNotOwner, Shard: r}
		}
		if string(c.Payload) == "fail" {
			return Result{Err: ErrApplication}
		}
		m.appLog[c.Shard] = append(m.appLog[c.Shard], string(c.Payload)+"@"+itoa(c.Epoch))
		return Result{Response: []byte("n=" + itoa(uint64(len(m.appLog[c.Shard]))))}
	case DeclareElection:
		if c.Name == "" || c.Partitions == 0 || (m.partitions != 0 && c.Partitions != m.partitions) {
			return Result{Err: ErrInvalid}
		}
		for _, e := range m.elections {
			if e.Group == c.Group && e.Name == c.Name {
				return Result{Election: e, Duplicate: true}
			}
		}
		e := ElectionRecord{Group: c.Group, Name: c.Name, Shard: c.Partitions + uint32(len(m.elections)), DeclaredAt: c.Now}
		m.partitions = c.Partitions
		m.elections = append(m.elections, e)
		return Result{Election: e}
	case Settings:
		defer m.prune(c.Now)
		if c.JobRetention < 0 {
			return Result{Err: ErrInvalid}
		}
		if c.JobRetention != 0 {
			m.settings.JobRetention = c.JobRetention
		}
		if c.MaxFinishedJobs != 0 {
			m.settings.MaxFinishedJobs = c.MaxFinishedJobs
		}
		if c.DefaultMaxAttempts != 0 {
			m.settings.DefaultMaxAttempts = c.DefaultMaxAttempts
		}
		return Result{}
	}
	return Result{Err: ErrInvalid}
}

func (m *model) checkFinish(shard uint32, epoch, id uint64, attempt uint32) (JobRecord, Result) {
	j, ok := m.jobs[id]
	if !ok || j.Shard != shard {
		return j, Result{Err: ErrUnknownJob}
	}
	r := m.shard(shard)
	switch {
	case j.State == JobCompleted || j.State == JobDead:
		return j, Result{Err: ErrJobFinished, Job: j}
	case r.Epoch != epoch:
		return j, Result{Err: ErrStaleEpoch, Job: j, Shard: r}
	case !m.valid(r):
		return j, Result{Err: ErrNotOwner, Job: j, Shard: r}
	case j.State != JobStarted:
		return j, Result{Err: ErrJobState, Job: j}
	case j.Attempt != attempt:
		return j, Result{Err: ErrWrongAttempt, Job: j}
	case j.Epoch != epoch:
		return j, Result{Err: ErrStaleEpoch, Job: j}
	}
	return j, Result{}
}

func (m *model) sortedJobIDs() []uint64 {
	ids := make([]uint64, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
