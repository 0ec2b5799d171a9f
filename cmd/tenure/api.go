package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/ledger"
)

// API limits.
const (
	// maxBodyBytes bounds every request body: the ledger's largest job
	// payload plus room for the other fields.
	maxBodyBytes = ledger.DefaultMaxPayload + 4*ledger.MaxStringLen + 1024
	// maxMoves is how many recent ownership moves /v1/moves keeps.
	maxMoves = 256
	// defaultJobsLimit and maxJobsLimit bound a page of GET /v1/jobs.
	defaultJobsLimit = 100
	maxJobsLimit     = 10000
	// maxListLimit bounds a page of the other list endpoints (and is
	// their default page size).
	maxListLimit = 10000
	// drainSlack is how long past ?wait= a drain's answer may take to
	// write (its connection deadline is moved past the server's timeouts).
	drainSlack = 30 * time.Second
	// defaultDrainWait bounds how long POST /v1/drain waits for the node
	// to hand every shard over before answering "still draining".
	defaultDrainWait = 60 * time.Second
)

// apiConfig configures the HTTP API.
type apiConfig struct {
	Node agentNode
	// Token, if set, is the bearer token of the write scope: every
	// endpoint. With it set, every /v1 endpoint needs a token.
	Token string
	// ReadToken, if set, is the bearer token of the read scope: GETs
	// (statuses, shards, jobs with payloads and results, moves). Needs
	// Token.
	ReadToken string
	// MetricsAuth puts /metrics under the read scope (open otherwise).
	MetricsAuth bool
	// Metrics serves /metrics; nil serves 404 there.
	Metrics http.Handler
	// Dashboard serves / ; nil serves 404 there.
	Dashboard http.Handler
	// DrainWait bounds POST /v1/drain (defaultDrainWait if zero).
	DrainWait time.Duration
	Logger    *slog.Logger
}

// api is the agent's HTTP API. Create it with newAPI, feed it ownership
// events with Run and serve Handler.
type api struct {
	cfg   apiConfig
	log   *slog.Logger
	moves moveLog
	auth  *tokenAuth
}

func newAPI(cfg apiConfig) *api {
	if cfg.DrainWait <= 0 {
		cfg.DrainWait = defaultDrainWait
	}
	a := &api{cfg: cfg, log: cfg.Logger, auth: newTokenAuth(cfg.Token, cfg.ReadToken)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a
}

// Run records ownership moves for /v1/moves until ctx ends or the node's
// event stream closes. observe, if not nil, sees every event too.
func (a *api) Run(ctx context.Context, observe func(ownershipEvent)) {
	events, cancel := a.cfg.Node.Subscribe()
	defer cancel()
	var members map[string]memberJSON
	var membersAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			reason := ""
			if sh, ok := a.cfg.Node.Shard(ev.Shard); ok && sh.Epoch == ev.Epoch {
				reason = sh.Reason
			}
			if now := time.Now(); members == nil || now.Sub(membersAt) > 200*time.Millisecond {
				members, membersAt = map[string]memberJSON{}, now
				for _, m := range a.cfg.Node.Members() {
					members[m.ID] = m
				}
			}
			a.moves.add(moveJSON{At: ev.At, Shard: ev.Shard, Epoch: ev.Epoch, From: ev.Previous, To: ev.Owner, Reason: reason, Cause: moveCause(ev, members)})
			if observe != nil {
				observe(ev)
			}
		}
	}
}

// Handler returns the API's routes wrapped in panic recovery.
func (a *api) Handler() http.Handler {
	mux := http.NewServeMux()
	read, write := a.auth.read, a.auth.write
	mux.Handle("/v1/status", methods{"GET": read(a.status)})
	mux.Handle("/v1/shards", methods{"GET": read(a.shards)})
	mux.Handle("/v1/shards/{id}", methods{"GET": read(a.shard)})
	mux.Handle("/v1/members", methods{"GET": read(a.members)})
	mux.Handle("/v1/elections", methods{"GET": read(a.elections)})
	mux.Handle("/v1/moves", methods{"GET": read(a.listMoves)})
	mux.Handle("/v1/jobs", methods{"GET": read(a.jobs), "POST": write(a.enqueue)})
	mux.Handle("/v1/jobs/{id}", methods{"GET": read(a.job)})
	mux.Handle("/v1/drain", methods{"POST": write(a.drain)})
	mux.Handle("/v1/undrain", methods{"POST": write(a.undrain)})
	mux.Handle("/v1/keyring", methods{"GET": write(a.keyring)})
	mux.Handle("/v1/keyring/{op}", methods{"POST": write(a.keyringOp)})
	mux.Handle("/v1/upgrade", methods{"GET": read(a.upgradeStatus)})
	mux.Handle("/v1/upgrade/finalize", methods{"POST": write(a.upgradeFinalize)})
	// Unknown /v1 paths answer 404 only to token holders: no probing.
	mux.Handle("/v1/", read(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	}))
	mux.Handle("/healthz", methods{"GET": a.healthz})
	mux.Handle("/readyz", methods{"GET": a.readyz})
	if a.cfg.Metrics != nil {
		mux.Handle("/metrics", metricsHandler(a.cfg.Metrics, a.auth, a.cfg.MetricsAuth))
	}
	if a.cfg.Dashboard != nil {
		mux.Handle("/", a.cfg.Dashboard)
	}
	return a.recoverer(mux)
}

// methods dispatches on the request method and answers others with 405
// and a JSON body.
type methods map[string]http.HandlerFunc

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, ok := m[r.Method]
	if !ok && r.Method == http.MethodHead {
		h, ok = m[http.MethodGet]
	}
	if !ok {
		allowed := make([]string, 0, len(m))
		for k := range m {
			allowed = append(allowed, k)
		}
		sort.Strings(allowed)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed (allowed: %s)", r.Method, strings.Join(allowed, ", ")))
		return
	}
	h(w, r)
}

func (a *api) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.log.Error("http handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	st := a.cfg.Node.Status()
	st.Version = Version
	writeJSON(w, http.StatusOK, st)
}

func (a *api) shards(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	owner, state := q.Get("owner"), q.Get("state")
	if state != "" && !slices.Contains([]string{"unowned", "owned", "revoking"}, state) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want unowned, owned or revoking", state))
		return
	}
	limit, after, ok := pageParams(w, r, maxListLimit, maxListLimit)
	if !ok {
		return
	}
	var from uint64
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 32)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q: want a shard id", after))
			return
		}
		from = n + 1
	}
	all := a.cfg.Node.Shards()
	out := make([]shardJSON, 0, min(len(all), limit))
	for _, s := range all {
		if uint64(s.Shard) >= from && (owner == "" || s.Owner == owner) && (state == "" || s.State == state) {
			out = append(out, s)
		}
	}
	writeList(w, r, out, limit, func(s shardJSON) string { return strconv.FormatUint(uint64(s.Shard), 10) })
}

// pageParams parses ?limit= (1..max, def when absent) and ?after= (a
// cursor: the last item of the previous page). It writes the 400 itself.
func pageParams(w http.ResponseWriter, r *http.Request, def, max int) (limit int, after string, ok bool) {
	q := r.URL.Query()
	limit = def
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1..%d", v, max))
			return 0, "", false
		}
		limit = n
	}
	after = q.Get("after")
	if len(after) > ledger.MaxStringLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after: %d bytes, want at most %d", len(after), ledger.MaxStringLen))
		return 0, "", false
	}
	return limit, after, true
}

// writeList answers a JSON array of at most limit items (already past the
// cursor, in cursor order). When more remain, the cursor of the next page
// is in the X-Next-After header and a Link rel="next" header, so the body
// stays the plain array it always was.
func writeList[T any](w http.ResponseWriter, r *http.Request, items []T, limit int, cursor func(T) string) {
	if len(items) > limit {
		items = items[:limit]
		next := cursor(items[len(items)-1])
		q := r.URL.Query()
		q.Set("after", next)
		q.Set("limit", strconv.Itoa(limit))
		w.Header().Set("X-Next-After", next)
		w.Header().Set("Link", fmt.Sprintf("<%s?%s>; rel=\"next\"", r.URL.Path, q.Encode()))
	}
	writeJSON(w, http.StatusOK, nonNil(items))
}

// pageAfter drops the items up to and including the cursor (items sorted
// by key ascending).
func pageAfter[T any](items []T, after string, key func(T) string) []T {
	if after == "" {
		return items
	}
	i, _ := slices.BinarySearchFunc(items, after, func(it T, k string) int { return strings.Compare(key(it), k) })
	for i < len(items) && key(items[i]) <= after {
		i++
	}
	return items[i:]
}

func (a *api) shard(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("shard id %q: want a non-negative integer", r.PathValue("id")))
		return
	}
	s, ok := a.cfg.Node.Shard(uint32(id))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("shard %d does not exist", id))
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (a *api) members(w http.ResponseWriter, r *http.Request) {
	limit, after, ok := pageParams(w, r, maxListLimit, maxListLimit)
	if !ok {
		return
	}
	id := func(m memberJSON) string { return m.ID }
	ms := a.cfg.Node.Members()
	slices.SortStableFunc(ms, func(x, y memberJSON) int { return strings.Compare(x.ID, y.ID) })
	writeList(w, r, pageAfter(ms, after, id), limit, id)
}

func (a *api) elections(w http.ResponseWriter, r *http.Request) {
	limit, after, ok := pageParams(w, r, maxListLimit, maxListLimit)
	if !ok {
		return
	}
	name := func(e electionJSON) string { return e.Name }
	es := a.cfg.Node.Elections()
	slices.SortStableFunc(es, func(x, y electionJSON) int { return strings.Compare(x.Name, y.Name) })
	writeList(w, r, pageAfter(es, after, name), limit, name)
}

// listMoves answers the recent moves, newest first; ?limit= bounds them
// (the log holds at most maxMoves, so there is no cursor).
func (a *api) listMoves(w http.ResponseWriter, r *http.Request) {
	limit, _, ok := pageParams(w, r, maxMoves, maxMoves)
	if !ok {
		return
	}
	ms := a.moves.list()
	writeJSON(w, http.StatusOK, ms[:min(len(ms), limit)])
}

func (a *api) enqueue(w http.ResponseWriter, r *http.Request) {
	var req jobRequest
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
		if len(f.v) > ledger.MaxStringLen {
			writeErrorCode(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%q is %d bytes long: at most %d", f.name, len(f.v), ledger.MaxStringLen))
			return
		}
	}
	if len(req.Payload) > ledger.DefaultMaxPayload {
		writeErrorCode(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf(`"payload" is %d bytes: at most %d`, len(req.Payload), ledger.DefaultMaxPayload))
		return
	}
	job, created, err := a.cfg.Node.EnqueueJob(r.Context(), req)
	if err != nil {
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

func (a *api) job(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j, ok := a.cfg.Node.Job(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %q not found", id))
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (a *api) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var jq jobQuery
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
		if !slices.Contains(jobStates, v) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want one of %s", v, strings.Join(jobStates, ", ")))
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
		n, err := strconv.ParseUint(afterStr, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q: want a job id", afterStr))
			return
		}
		after = n
	}
	// Count every state of the shard filter, then page the state's jobs
	// by id.
	all := a.cfg.Node.Jobs(jobQuery{Shard: jq.Shard})
	out := jobsJSON{Jobs: []jobJSON{}, Counts: map[string]int{}}
	for _, s := range jobStates {
		out.Counts[s] = 0
	}
	type idJob struct {
		id uint64
		j  jobJSON
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

func (a *api) drain(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	wait := a.cfg.DrainWait
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 10*time.Minute {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait %q: want a duration between 0s and 10m", v))
			return
		}
		wait = d
	}
	// A long wait outlives the server's read and write timeouts: move this
	// request's deadlines past it (a read deadline passing would cancel
	// the request's context; a write deadline, cut the answer).
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(wait + drainSlack)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	err := a.cfg.Node.Drain(ctx)
	done := err == nil
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		writeNodeError(w, err)
		return
	}
	st := a.cfg.Node.Status()
	code := http.StatusOK
	if !done {
		code = http.StatusAccepted
	}
	writeJSON(w, code, drainJSON{Node: st.Node, Draining: true, Done: done, Owned: st.Owned})
}

func (a *api) undrain(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	if err := a.cfg.Node.Undrain(r.Context()); err != nil {
		writeNodeError(w, err)
		return
	}
	st := a.cfg.Node.Status()
	writeJSON(w, http.StatusOK, drainJSON{Node: st.Node, Draining: false, Done: true, Owned: st.Owned})
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

// readyz answers 200 while the node is Healthy or Degraded (it can act:
// quorum and a valid lease) and 503 when Unhealthy; the body carries the
// report with its reasons either way.
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	h := a.cfg.Node.Health()
	code := http.StatusOK
	if h.Status != statusHealthy && h.Status != statusDegraded {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// decodeBody decodes one JSON object from the size-limited body into v,
// rejecting unknown fields and trailing data. It writes the 4xx itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/json", ct))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", maxBodyBytes))
			return false
		}
		if errors.Is(err, io.EOF) {
			writeError(w, http.StatusBadRequest, "empty body: want a JSON object")
			return false
		}
		writeError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad JSON body: trailing data after the object")
		return false
	}
	return true
}

// emptyBody rejects a request that carries a body where none is expected.
func emptyBody(w http.ResponseWriter, r *http.Request) bool {
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 1))
	if n > 0 {
		writeError(w, http.StatusBadRequest, "this endpoint takes no body")
		return false
	}
	return true
}

func writeNodeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, errQueueFull):
		w.Header().Set("Retry-After", "1")
		writeErrorCode(w, http.StatusTooManyRequests, "queue_full", err.Error())
		return
	case errors.Is(err, errBadInput):
		code = http.StatusBadRequest
	case errors.Is(err, errNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errConflict):
		code = http.StatusConflict
	case errors.Is(err, errUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = http.StatusGatewayTimeout
	}
	writeError(w, code, err.Error())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorJSON{Error: msg})
}

// writeErrorCode is writeError with a machine-readable code.
func writeErrorCode(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, errorJSON{Error: msg, Code: errCode})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(errorJSON{Error: "encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// moveCause explains a move from the previous owner's membership.
func moveCause(ev ownershipEvent, members map[string]memberJSON) string {
	prev := ev.Previous
	switch {
	case ev.Owner == "":
		if prev == "" {
			return "unowned"
		}
		return prev + " released it"
	case prev == "":
		return "first owner"
	case prev == ev.Owner:
		return "re-granted to " + prev
	}
	m, ok := members[prev]
	switch {
	case !ok:
		return prev + " unknown"
	case m.State == "dead" || m.State == "left" || m.State == "suspect":
		return prev + " " + m.State
	case !m.Live:
		return prev + " lease expired"
	case m.Draining:
		return prev + " draining"
	case m.Health < 0.5:
		return prev + " unhealthy"
	}
	return "rebalance"
}

// moveLog keeps the most recent ownership moves.
type moveLog struct {
	mu    sync.Mutex
	moves []moveJSON // oldest first
}

func (l *moveLog) add(m moveJSON) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.moves = append(l.moves, m)
	if len(l.moves) > maxMoves {
		l.moves = slices.Delete(l.moves, 0, len(l.moves)-maxMoves)
	}
}

// list returns the moves newest first.
func (l *moveLog) list() []moveJSON {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]moveJSON, len(l.moves))
	for i, m := range l.moves {
		out[len(out)-1-i] = m
	}
	return out
}
