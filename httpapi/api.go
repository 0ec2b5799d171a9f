package httpapi

import (
	"context"
	"errors"
	"fmt"
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

// owner answers the shard ?key= hashes to and its committed owner.
func (h *Handler) owner(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" || len(key) > node.MaxStringLen {
		writeCode(w, apitypes.CodeInvalid, fmt.Sprintf("key: want 1..%d bytes", node.MaxStringLen))
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
