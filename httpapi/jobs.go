// The jobs endpoints: enqueue (POST /v1/jobs), one job, and the job list.

package httpapi

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

func (h *Handler) enqueue(w http.ResponseWriter, r *http.Request) {
	var req apitypes.JobRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Type == "" {
		writeError(w, http.StatusBadRequest, `"type" is required`)
		return
	}
	if req.ShardKey == "" && req.Key == "" {
		writeError(w, http.StatusBadRequest, `give "key" or "shard_key" to pick the job's shard`)
		return
	}
	if len(req.Payload) > 0 && !json.Valid(req.Payload) {
		writeError(w, http.StatusBadRequest, `"payload" is not valid JSON`)
		return
	}
	// The ledger's limits, checked before anything is proposed.
	for _, f := range []struct{ name, v string }{{"key", req.Key}, {"type", req.Type}, {"shard_key", req.ShardKey}} {
		if len(f.v) > node.MaxStringLen {
			writeCode(w, apitypes.CodeInvalid, fmt.Sprintf("%q is %d bytes long: at most %d", f.name, len(f.v), node.MaxStringLen))
			return
		}
	}
	if len(req.Payload) > node.DefaultMaxPayload {
		writeCode(w, apitypes.CodeTooLarge, fmt.Sprintf(`"payload" is %d bytes: at most %d`, len(req.Payload), node.DefaultMaxPayload))
		return
	}
	id, keyed, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var job apitypes.Job
	var created bool
	var err error
	switch rb, can := h.node.(RequestBackend); {
	case can:
		if keyed {
			w.Header().Set(HeaderIdempotencyKey, r.Header.Get(HeaderIdempotencyKey))
		}
		job, created, err = rb.EnqueueJobID(r.Context(), req, id)
	default:
		// A backend without request ids ignores the key and does not echo
		// it: a client then does not retry keyless enqueues.
		job, created, err = h.node.EnqueueJob(r.Context(), req)
	}
	if err != nil {
		if errors.Is(err, ErrQueueFull) && h.metrics != nil {
			h.metrics.queueFull.Inc()
		}
		writeNodeError(w, err)
		return
	}
	code := http.StatusCreated
	if !created {
		code = http.StatusOK
	}
	w.Header().Set("Location", "/v1/jobs/"+job.ID)
	writeJSON(w, code, job)
}

func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	if !h.readBarrier(w, r) {
		return
	}
	id := r.PathValue("id")
	j, ok := h.node.Job(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %q not found", id))
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (h *Handler) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var jq JobQuery
	if v := q.Get("shard"); v != "" {
		s, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("shard %q: want a non-negative integer", v))
			return
		}
		s32 := uint32(s)
		jq.Shard = &s32
	}
	if v := q.Get("state"); v != "" {
		if !slices.Contains(apitypes.JobStates, v) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want one of %s", v, strings.Join(apitypes.JobStates, ", ")))
			return
		}
		jq.State = v
	}
	limit, afterStr, ok := pageParams(w, r, defaultJobsLimit, maxJobsLimit)
	if !ok {
		return
	}
	var after uint64
	if afterStr != "" {
		if after, ok = parseCursor(w, afterStr, 64, "a job id"); !ok {
			return
		}
	}
	if !h.readBarrier(w, r) {
		return
	}
	// Count every state of the shard filter, then page the state's jobs
	// by id.
	all := h.node.Jobs(JobQuery{Shard: jq.Shard})
	out := apitypes.JobList{Jobs: []apitypes.Job{}, Counts: map[string]int{}}
	for _, s := range apitypes.JobStates {
		out.Counts[s] = 0
	}
	type idJob struct {
		id uint64
		j  apitypes.Job
	}
	var match []idJob
	for _, j := range all {
		out.Counts[j.State]++
		id, err := strconv.ParseUint(j.ID, 10, 64)
		if err == nil && id > after && (jq.State == "" || j.State == jq.State) {
			match = append(match, idJob{id, j})
		}
	}
	slices.SortFunc(match, func(x, y idJob) int { return cmp.Compare(x.id, y.id) })
	for _, m := range match[:min(len(match), limit)] {
		out.Jobs = append(out.Jobs, m.j)
	}
	if len(match) > limit {
		out.Next = out.Jobs[len(out.Jobs)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}
