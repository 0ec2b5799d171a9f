package httpapi

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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// API limits.
const (
	// maxBodyBytes bounds every request body: the ledger's largest job
	// payload plus room for the other fields.
	maxBodyBytes = node.DefaultMaxPayload + 4*node.MaxStringLen + 1024
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

// Options configures the API.
type Options struct {
	// Token, if set, is a bearer token of the admin scope: every
	// endpoint. With any token or TokensFile set, every /v1 endpoint
	// needs a token.
	Token string
	// JobsToken, if set, is a bearer token of the jobs scope: reads and
	// enqueueing jobs (what a service needs). Needs Token or TokensFile.
	JobsToken string
	// ReadToken, if set, is a bearer token of the read scope: GETs
	// (statuses, shards, jobs with payloads and results, moves). Needs
	// Token or TokensFile.
	ReadToken string
	// TokensFile, if set, names a file of more tokens, one `scope token`
	// per line (scope read, jobs or admin; # comments), re-read when it
	// changes (checked at most once a second): tokens are added and
	// revoked without a restart. A file that no longer parses keeps the
	// previous tokens and logs an error; one that does not parse at New
	// is an error.
	TokensFile string
	// AllowedHosts are the names (besides IP literals, localhost and
	// *.localhost) the API answers to in the Host header; "*" allows
	// any. Other names answer 421: a DNS-rebinding page cannot read or
	// change anything.
	AllowedHosts []string
	// MetricsAuth puts /metrics under the read scope (open otherwise).
	MetricsAuth bool
	// Registry receives the API's tenure_* metrics and is what /metrics
	// serves. Nil: a registry of the handler's own, with the Go and
	// process collectors. Registering on a registry that already holds
	// them (a second handler on it) fails.
	Registry *prometheus.Registry
	// NoMetrics serves no /metrics and registers nothing.
	NoMetrics bool
	// NoDashboard serves no dashboard at /.
	NoDashboard bool
	// DrainWait bounds POST /v1/drain without ?wait= (60s if zero).
	DrainWait time.Duration
	// Version is what /v1/status reports as the serving binary's version;
	// empty reports the node's gossiped version.
	Version string
	// ObserveInterval is how often the node is sampled for metrics (100ms
	// if zero).
	ObserveInterval time.Duration
	// Logger logs panics, keyring changes and finalized upgrades; nil
	// discards.
	Logger *slog.Logger
}

// Handler serves the API. It records ownership moves (/v1/moves) and
// samples the node for metrics in the background until Close or until the
// node closes.
type Handler struct {
	opts    Options
	node    Backend
	log     *slog.Logger
	moves   moveLog
	auth    *tokenAuth
	metrics *metrics
	mux     http.Handler

	stop context.CancelFunc
	done chan struct{}
}

// New returns the API of n: the versioned JSON API under /v1/, /healthz,
// /readyz, /metrics and the dashboard at /. Mount it on a mux at its root
// (its paths are absolute: the dashboard and clients call /v1/...), and
// Close it before closing n.
func New(n *node.Node, o Options) (*Handler, error) {
	if n == nil {
		return nil, errors.New("httpapi: nil node")
	}
	return NewWithBackend(Adapt(n), o)
}

// NewWithBackend is New over any Backend.
func NewWithBackend(b Backend, o Options) (*Handler, error) {
	if b == nil {
		return nil, errors.New("httpapi: nil backend")
	}
	if (o.ReadToken != "" || o.JobsToken != "") && o.Token == "" && o.TokensFile == "" {
		return nil, errors.New("httpapi: a read or jobs token needs an admin token (Token) or a TokensFile")
	}
	if o.ReadToken != "" && o.ReadToken == o.Token {
		return nil, errors.New("httpapi: the read token must differ from the write token")
	}
	auth, err := newTokenAuth(o)
	if err != nil {
		return nil, err
	}
	if o.DrainWait <= 0 {
		o.DrainWait = defaultDrainWait
	}
	if o.ObserveInterval <= 0 {
		o.ObserveInterval = 100 * time.Millisecond
	}
	h := &Handler{opts: o, node: b, log: o.Logger, auth: auth, done: make(chan struct{})}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if !o.NoMetrics {
		reg := o.Registry
		if reg == nil {
			reg = prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		}
		m, err := newMetrics(reg)
		if err != nil {
			return nil, err
		}
		h.metrics = m
	}
	h.mux = h.routes()
	// Subscribe before returning, so no move after New is missed.
	self := b.Status().Node
	events, cancel := b.Subscribe()
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() {
		defer close(h.done)
		defer cancel()
		var wg sync.WaitGroup
		if h.metrics != nil {
			wg.Add(1)
			go func() { defer wg.Done(); observeShards(ctx, b, self, h.metrics, o.ObserveInterval) }()
		}
		h.recordMoves(ctx, events)
		stop() // the node closed: stop sampling it too
		wg.Wait()
	}()
	return h, nil
}

// ServeHTTP serves the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Close stops the background work (moves, metrics). The handler keeps
// answering; /v1/moves stops growing.
func (h *Handler) Close() error {
	h.stop()
	<-h.done
	return nil
}

// recordMoves records ownership moves for /v1/moves until ctx ends or the
// node's event stream closes.
func (h *Handler) recordMoves(ctx context.Context, events <-chan OwnershipEvent) {
	var members map[string]apitypes.Member
	var membersAt time.Time
	var mt moveTracker
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			reason := ""
			if sh, ok := h.node.Shard(ev.Shard); ok && sh.Epoch == ev.Epoch {
				reason = sh.Reason
			}
			if now := time.Now(); members == nil || now.Sub(membersAt) > 200*time.Millisecond {
				members, membersAt = map[string]apitypes.Member{}, now
				for _, m := range h.node.Members() {
					members[m.ID] = m
				}
			}
			h.moves.add(mt.move(ev, reason, members))
		}
	}
}

// routes are the API's routes wrapped in panic recovery.
func (h *Handler) routes() http.Handler {
	mux := http.NewServeMux()
	read, jobs, admin := h.auth.read, h.auth.jobs, h.auth.admin
	mux.Handle("/v1/status", methods{"GET": read(h.status)})
	mux.Handle("/v1/shards", methods{"GET": read(h.shards)})
	mux.Handle("/v1/shards/{id}", methods{"GET": read(h.shard)})
	mux.Handle("/v1/owner", methods{"GET": read(h.owner)})
	mux.Handle("/v1/members", methods{"GET": read(h.members)})
	mux.Handle("/v1/elections", methods{"GET": read(h.elections)})
	mux.Handle("/v1/moves", methods{"GET": read(h.listMoves)})
	mux.Handle("/v1/jobs", methods{"GET": read(h.jobs), "POST": jobs(h.enqueue)})
	mux.Handle("/v1/jobs/{id}", methods{"GET": read(h.job)})
	mux.Handle("/v1/drain", methods{"POST": admin(h.drain)})
	mux.Handle("/v1/undrain", methods{"POST": admin(h.undrain)})
	mux.Handle("/v1/keyring", methods{"GET": admin(h.keyring)})
	mux.Handle("/v1/keyring/{op}", methods{"POST": admin(h.keyringOp)})
	mux.Handle("/v1/upgrade", methods{"GET": read(h.upgradeStatus)})
	mux.Handle("/v1/debug/digest", methods{"GET": read(h.digest)})
	mux.Handle("/v1/upgrade/finalize", methods{"POST": admin(h.upgradeFinalize)})
	mux.Handle("/v1/placement", methods{"GET": read(h.placementRules)})
	mux.Handle("/v1/placement/pin", methods{"POST": admin(h.pin)})
	mux.Handle("/v1/placement/exclude", methods{"POST": admin(h.exclude)})
	mux.Handle("/v1/revocations", methods{"GET": read(h.revocations), "POST": admin(h.revoke)})
	mux.Handle("/v1/fenced", methods{"GET": read(h.fencedPolicy), "POST": admin(h.setFenced)})
	// Unknown /v1 paths answer 404 only to token holders: no probing.
	mux.Handle("/v1/", read(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	}))
	mux.Handle("/healthz", methods{"GET": healthz})
	mux.Handle("/readyz", methods{"GET": h.readyz})
	if h.metrics != nil {
		mux.Handle("/metrics", metricsHandler(h.metrics.handler(), h.auth, h.opts.MetricsAuth))
	}
	if !h.opts.NoDashboard {
		mux.Handle("/", dashboardHandler())
	}
	var refused func(string)
	if h.metrics != nil {
		refused = h.metrics.browserRefused
	}
	return recoverer(h.log, browserGuard(newHostGuard(h.opts.AllowedHosts), refused, mux))
}

// StartingHandler answers while a node joins its cluster, before New can
// run: /healthz alive, /readyz 503, /metrics from o.Registry (under the
// read scope with o.MetricsAuth; absent without a registry), 503 elsewhere.
func StartingHandler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", healthz)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusServiceUnavailable, apitypes.Health{Status: apitypes.StatusUnhealthy, Reasons: []string{"starting: joining the cluster"}})
	})
	if o.Registry != nil && !o.NoMetrics {
		auth, err := newTokenAuth(o)
		if err != nil {
			auth = &tokenAuth{enabled: true} // refuses every token; New reports the error
		}
		mux.Handle("/metrics", metricsHandler(registryHandler(o.Registry), auth, o.MetricsAuth))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "agent is starting: joining the cluster")
	})
	return mux
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

func recoverer(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("http handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	st := h.node.Status()
	if h.opts.Version != "" {
		st.Version = h.opts.Version
	} else if st.Version == "" {
		for _, m := range st.Members {
			if m.ID == st.Node {
				st.Version = m.Version
			}
		}
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) shards(w http.ResponseWriter, r *http.Request) {
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
		n, ok := parseCursor(w, after, 32, "a shard id")
		if !ok {
			return
		}
		from = n + 1
	}
	all := h.node.Shards()
	out := make([]apitypes.Shard, 0, min(len(all), limit))
	for _, s := range all {
		if uint64(s.Shard) >= from && (owner == "" || s.Owner == owner) && (state == "" || s.State == state) {
			out = append(out, s)
		}
	}
	writeList(w, r, out, limit, func(s apitypes.Shard) string { return strconv.FormatUint(uint64(s.Shard), 10) })
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
	if len(after) > node.MaxStringLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after: %d bytes, want at most %d", len(after), node.MaxStringLen))
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

// owner answers the shard ?key= hashes to and its committed owner.
func (h *Handler) owner(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" || len(key) > node.MaxStringLen {
		writeErrorCode(w, http.StatusBadRequest, "invalid", fmt.Sprintf("key: want 1..%d bytes", node.MaxStringLen))
		return
	}
	id := h.node.ShardFor(key)
	s, ok := h.node.Shard(id)
	if !ok {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("key %q hashes to shard %d, which does not exist", key, id))
		return
	}
	o := apitypes.Owner{Key: key, Shard: s.Shard, Epoch: s.Epoch, State: s.State, Valid: s.Valid}
	if s.State != "unowned" {
		o.Owner = s.Owner
		for _, m := range h.node.Members() {
			if m.ID == o.Owner {
				o.HTTPAddr = m.HTTPAddr
			}
		}
	}
	writeJSON(w, http.StatusOK, o)
}

func (h *Handler) shard(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("shard id %q: want a non-negative integer", r.PathValue("id")))
		return
	}
	s, ok := h.node.Shard(uint32(id))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("shard %d does not exist", id))
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) members(w http.ResponseWriter, r *http.Request) {
	listByKey(w, r, h.node.Members, func(m apitypes.Member) string { return m.ID })
}

func (h *Handler) elections(w http.ResponseWriter, r *http.Request) {
	listByKey(w, r, h.node.Elections, func(e apitypes.Election) string { return e.Name })
}

// listByKey answers the items get returns, sorted by key and paged with
// ?limit= and ?after= (a key).
func listByKey[T any](w http.ResponseWriter, r *http.Request, get func() []T, key func(T) string) {
	limit, after, ok := pageParams(w, r, maxListLimit, maxListLimit)
	if !ok {
		return
	}
	items := get()
	slices.SortStableFunc(items, func(x, y T) int { return strings.Compare(key(x), key(y)) })
	writeList(w, r, pageAfter(items, after, key), limit, key)
}

// listMoves answers the recent moves, newest first; ?limit= bounds them
// (the log holds at most maxMoves, so there is no cursor).
func (h *Handler) listMoves(w http.ResponseWriter, r *http.Request) {
	limit, _, ok := pageParams(w, r, maxMoves, maxMoves)
	if !ok {
		return
	}
	ms := h.moves.list()
	writeJSON(w, http.StatusOK, ms[:min(len(ms), limit)])
}

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
			writeErrorCode(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%q is %d bytes long: at most %d", f.name, len(f.v), node.MaxStringLen))
			return
		}
	}
	if len(req.Payload) > node.DefaultMaxPayload {
		writeErrorCode(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf(`"payload" is %d bytes: at most %d`, len(req.Payload), node.DefaultMaxPayload))
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

func (h *Handler) drain(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	wait := h.opts.DrainWait
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
	err := h.node.Drain(ctx)
	others := !errors.Is(err, ErrNoEligibleNode)
	if err != nil && others && !errors.Is(err, context.DeadlineExceeded) {
		writeNodeError(w, err)
		return
	}
	st := h.node.Status()
	d := apitypes.Drain{Node: st.Node, Draining: true, Done: err == nil && st.Owned == 0, Owned: st.Owned, OthersEligible: others}
	code := http.StatusOK
	switch {
	case !others:
		d.Reason = fmt.Sprintf("cannot hand over: no other node is eligible to take its %d shards; they stay on %s until one is (or undrain it)", st.Owned, st.Node)
	case !d.Done:
		d.Reason = fmt.Sprintf("still acting on %d shards after %s; the drain goes on", st.Owned, wait)
	}
	if !d.Done {
		code = http.StatusAccepted
	}
	writeJSON(w, code, d)
}

func (h *Handler) undrain(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	if err := h.node.Undrain(r.Context()); err != nil {
		writeNodeError(w, err)
		return
	}
	st := h.node.Status()
	writeJSON(w, http.StatusOK, apitypes.Drain{Node: st.Node, Draining: false, Done: true, Owned: st.Owned})
}

func healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

// readyz answers 200 while the node is Healthy or Degraded (it can act:
// quorum and a valid lease) and 503 when Unhealthy; the body carries the
// report with its reasons either way.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	rep := h.node.Health()
	code := http.StatusOK
	if rep.Status != apitypes.StatusHealthy && rep.Status != apitypes.StatusDegraded {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, rep)
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
	case errors.Is(err, ErrQueueFull):
		w.Header().Set("Retry-After", "1")
		writeErrorCode(w, http.StatusTooManyRequests, "queue_full", err.Error())
		return
	case errors.Is(err, ErrRequestIDReused):
		writeErrorCode(w, http.StatusUnprocessableEntity, "idempotency_key_reused", err.Error())
		return
	case errors.Is(err, ErrForbidden), errors.Is(err, node.ErrUnauthorized):
		// The leader refused this node's certificate (a member asking for
		// an operator action): send it to a voter-capable node's API.
		writeErrorCode(w, http.StatusForbidden, "forbidden", err.Error())
		return
	case errors.Is(err, ErrBadInput):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrNotImplemented):
		code = http.StatusNotImplemented
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = http.StatusGatewayTimeout
	}
	writeError(w, code, err.Error())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apitypes.ErrorBody{Error: msg})
}

// writeErrorCode is writeError with a machine-readable code.
func writeErrorCode(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, apitypes.ErrorBody{Error: msg, Code: errCode})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(apitypes.ErrorBody{Error: "encoding the answer: " + err.Error()})
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

// moveTracker turns ownership events into moves. It remembers each
// shard's last owner: a failover is seen as two events — the owner's lease
// lapses (owner "") and then the grant to the next one (previous "") —
// and the grant is the move from the owner that lapsed.
type moveTracker struct {
	last map[uint32]string
}

func (t *moveTracker) move(ev OwnershipEvent, reason string, members map[string]apitypes.Member) apitypes.Move {
	if t.last == nil {
		t.last = map[uint32]string{}
	}
	from := ev.Previous
	if from == "" && ev.Owner != "" {
		from = t.last[ev.Shard]
	}
	if ev.Owner != "" {
		t.last[ev.Shard] = ev.Owner
	} else if ev.Previous != "" {
		t.last[ev.Shard] = ev.Previous
	}
	return apitypes.Move{At: ev.At, Shard: ev.Shard, Epoch: ev.Epoch, From: from, To: ev.Owner, Reason: reason,
		Cause: moveCause(from, ev.Owner, reason, members)}
}

// moveCause explains a move from prev to owner ("" while unowned): from
// the ledger's reason for the record when it names one (a grant after
// "owner n5 expired", a handoff), else from the previous owner's
// membership.
func moveCause(prev, owner, reason string, members map[string]apitypes.Member) string {
	m, known := members[prev]
	switch {
	case owner == "" && prev == "":
		return "unowned"
	case owner == "":
		switch {
		case known && (m.State == "dead" || m.State == "left"):
			return prev + " " + m.State
		case known && !m.Live:
			return prev + " lease expired"
		}
		return prev + " released it"
	case prev == "":
		return "first owner"
	case prev == owner:
		return "re-granted to " + prev
	}
	if r, ok := strings.CutPrefix(reason, "drain "); ok { // a revocation's reason
		return "drain of " + r
	}
	if r, ok := strings.CutPrefix(reason, "owner "); ok { // the ledger's grant reasons
		switch {
		case strings.HasSuffix(r, " expired"):
			return strings.TrimSuffix(r, " expired") + " lease expired"
		case strings.HasSuffix(r, " restarted"):
			return r
		case strings.HasSuffix(r, " unknown"):
			return strings.TrimSuffix(r, " unknown") + " left"
		}
	}
	// A handoff is planned: the previous owner released the shard to the
	// target of its revocation (a drain, a rebalance, an operator's pin or
	// exclusion), whose reason it carries ("handoff: pinned to n3"). A
	// takeover follows a revocation its owner did not answer.
	if r, ok := strings.CutPrefix(reason, "handoff: "); ok {
		switch {
		case strings.HasPrefix(r, "pinned to "), strings.HasSuffix(r, " excluded"):
			return r
		case strings.HasPrefix(r, "load "):
			return "load balance"
		case strings.HasPrefix(r, "drain "):
			return "drain of " + strings.TrimPrefix(r, "drain ")
		}
	}
	handoff := reason == "handoff" || strings.HasPrefix(reason, "handoff: ") || strings.HasPrefix(reason, "transfer from ") || reason == "rebalance"
	switch {
	case !known:
		return prev + " left"
	case m.Excluded:
		return prev + " excluded"
	case m.Draining:
		return "drain of " + prev
	case handoff:
		return "rebalance"
	case m.State == "dead" || m.State == "left" || m.State == "suspect":
		return prev + " " + m.State
	case !m.Live:
		return prev + " lease expired"
	case m.Health < 0.5:
		return prev + " unhealthy"
	}
	return "rebalance"
}

// moveLog keeps the most recent ownership moves.
type moveLog struct {
	mu    sync.Mutex
	moves []apitypes.Move // oldest first
}

func (l *moveLog) add(m apitypes.Move) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.moves = append(l.moves, m)
	if len(l.moves) > maxMoves {
		l.moves = slices.Delete(l.moves, 0, len(l.moves)-maxMoves)
	}
}

// list returns the moves newest first.
func (l *moveLog) list() []apitypes.Move {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]apitypes.Move, len(l.moves))
	for i, m := range l.moves {
		out[len(out)-1-i] = m
	}
	return out
}

// parseCursor parses a numeric ?after= cursor of bitSize bits, or answers
// 400 saying it wants what.
func parseCursor(w http.ResponseWriter, after string, bitSize int, what string) (uint64, bool) {
	n, err := strconv.ParseUint(after, 10, bitSize)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q: want %s", after, what))
		return 0, false
	}
	return n, true
}
