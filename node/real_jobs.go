// The real backend's jobs: enqueue, start and finish commit through the
// commit path; the reads (job, jobByKey, pendingJobs, jobs) come from the
// applied ledger state.

package node

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// jobFromRecord is the one mapping of a job from the ledger's record (log
// shape: nanosecond ints) to node's Job (time.Time, time.Duration); the
// HTTP shape is mapped from Job in one place too (httpapi's jobFrom).
func jobFromRecord(j ledger.JobRecord) Job {
	t := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	return Job{
		ID: j.ID, Shard: j.Shard, Key: j.Key, Type: j.Type, Payload: j.Payload, State: j.State,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Owner: j.Owner, Epoch: j.Epoch,
		Timeout: time.Duration(j.Timeout), Result: j.Result, Error: j.LastError,
		NotBefore: t(j.NotBefore), EnqueuedAt: t(j.EnqueuedAt), StartedAt: t(j.StartedAt), FinishedAt: t(j.FinishedAt),
	}
}

// record is the part of j's ledger record the job rules read
// (ledger.JobRecord.Runnable): jobFromRecord's inverse on those fields.
func (j Job) record() ledger.JobRecord {
	ns := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixNano()
	}
	return ledger.JobRecord{ID: j.ID, Shard: j.Shard, State: j.State, Attempt: j.Attempt, Epoch: j.Epoch,
		StartedAt: ns(j.StartedAt), Timeout: int64(j.Timeout), NotBefore: ns(j.NotBefore)}
}

func (b *netBackend) enqueueJob(ctx context.Context, shard uint32, spec JobSpec, maxPending int) (Job, bool, error) {
	c := ledger.JobEnqueue{Shard: shard, Key: spec.Key, Type: spec.Type, Payload: spec.Payload,
		MaxAttempts: uint32(spec.MaxAttempts), Now: time.Now().UnixNano(), MaxPending: uint32(min(maxPending, math.MaxUint32))}
	var r ledger.Result
	var err error
	if sc, id := b.withRequestID(c, spec.RequestID); !id.IsZero() {
		// A retry carries the first try's request id, so the ledger answers
		// it with the first application's result: created stays true for
		// the caller whose enqueue created the job, and a job without a key
		// is created once.
		r, err = b.commitRetry(ctx, sc, nil)
	} else if spec.Key != "" {
		// Cluster version 1. Idempotent by key: a retry returns the job
		// the first try created, but as a duplicate (created false).
		r, err = b.commitRetry(ctx, c, nil)
	} else {
		r, err = b.commit(ctx, c)
	}
	if err != nil {
		return Job{}, false, err
	}
	return jobFromRecord(r.Job), !r.Duplicate, nil
}

func (b *netBackend) startJob(ctx context.Context, tok Token, id uint64, attempt uint32, timeout time.Duration) (Job, error) {
	r, err := b.commitRetry(ctx, ledger.JobStart{Shard: tok.Shard, Epoch: tok.Epoch, Owner: b.id, Job: id, Attempt: attempt,
		Timeout: int64(timeout), Now: time.Now().UnixNano()},
		func(st *ledger.State) (ledger.Result, bool) {
			j, ok := st.Job(id)
			return ledger.Result{Job: j}, ok && j.State == ledger.JobStarted && j.Attempt == attempt+1 &&
				j.Owner == b.id && j.Epoch == tok.Epoch
		})
	return jobFromRecord(r.Job), err
}

func (b *netBackend) finishJob(ctx context.Context, tok Token, id uint64, attempt uint32, out jobOutcome) (Job, error) {
	now := time.Now().UnixNano()
	var c ledger.Command = ledger.JobComplete{Shard: tok.Shard, Epoch: tok.Epoch, Job: id, Attempt: attempt, Result: out.result, Now: now}
	if !out.ok {
		c = ledger.JobFail{Shard: tok.Shard, Epoch: tok.Epoch, Job: id, Attempt: attempt, Error: out.reason, Backoff: int64(out.backoff), Now: now}
	}
	r, err := b.commitRetry(ctx, c, func(st *ledger.State) (ledger.Result, bool) {
		j, ok := st.Job(id)
		if !ok || j.Attempt != attempt || j.Epoch != tok.Epoch {
			return ledger.Result{}, false
		}
		if out.ok {
			return ledger.Result{Job: j}, j.State == ledger.JobCompleted
		}
		return ledger.Result{Job: j}, j.State == ledger.JobPending || j.State == ledger.JobDead
	})
	return jobFromRecord(r.Job), err
}

func (b *netBackend) job(id uint64) (Job, bool) {
	j, ok := b.fsm.State().Job(id)
	if !ok {
		return Job{}, false
	}
	return jobFromRecord(j), true
}

func (b *netBackend) jobByKey(shard uint32, key string) (Job, bool) {
	j, ok := b.fsm.State().JobByKey(shard, key)
	if !ok {
		return Job{}, false
	}
	return jobFromRecord(j), true
}

func (b *netBackend) pendingJobs(shard uint32, limit int) int {
	return b.fsm.State().CountJobs(shard, ledger.JobPending, limit)
}

func (b *netBackend) jobs(q JobQuery) []Job {
	st := b.fsm.State()
	var recs []ledger.JobRecord
	if len(q.Shards) > 0 && len(q.States) > 0 {
		shards := slices.Clone(q.Shards)
		slices.Sort(shards)
		for _, s := range slices.Compact(shards) {
			var per []ledger.JobRecord
			for _, js := range q.States {
				per = append(per, st.Jobs(s, js)...)
			}
			slices.SortFunc(per, func(a, b ledger.JobRecord) int { return cmp.Compare(a.ID, b.ID) })
			recs = append(recs, per...)
		}
	} else {
		recs = st.AllJobs()
		slices.SortStableFunc(recs, func(a, b ledger.JobRecord) int { return cmp.Compare(a.Shard, b.Shard) })
	}
	var out []Job
	for _, r := range recs {
		j := jobFromRecord(r)
		if !q.match(j) {
			continue
		}
		out = append(out, j)
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out
}
