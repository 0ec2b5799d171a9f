// Package client is a typed Go client of tenure's HTTP API (package
// httpapi): what the tenure agent serves and what a service embedding
// package node mounts. A process that is not a cluster member uses it to
// read ownership, enqueue and watch jobs, and drain nodes.
//
//	c, err := client.New("127.0.0.1:7948", client.Options{Token: token})
//	owner, err := c.Owner(ctx, "tenant-42")
//	job, created, err := c.EnqueueJob(ctx, client.JobRequest{Type: "email", Key: "msg-1"})
//	resp, err := c.Route(ctx, "tenant-42", req) // an application request, straight to the key's owner
//
// Idempotent calls (GETs, an enqueue with an idempotency key, drain and
// undrain) are retried with backoff on 502, 503, 504 and connection
// errors. Error answers are *APIError values that match the sentinels
// (ErrNotFound, ErrUnauthorized, ErrQueueFull, ...) with errors.Is.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// The API's JSON shapes, under this package's name.
type (
	Status        = apitypes.Status
	Health        = apitypes.Health
	Shard         = apitypes.Shard
	OwnerInfo     = apitypes.Owner
	Member        = apitypes.Member
	Election      = apitypes.Election
	JobRequest    = apitypes.JobRequest
	Job           = apitypes.Job
	JobList       = apitypes.JobList
	Move          = apitypes.Move
	DrainResult   = apitypes.Drain
	Keyring       = apitypes.Keyring
	UpgradeStatus = apitypes.UpgradeStatus
	// PlacementRules are the operator's pins and exclusions.
	PlacementRules = apitypes.PlacementRules
	// Revocations is the committed deny-list (tenure node revocations).
	Revocations = apitypes.Revocations
)

// Defaults.
const (
	DefaultTimeout = 10 * time.Second
	DefaultRetries = 3
	// maxAnswer bounds an answer's body.
	maxAnswer = 64 << 20
)

// Options configures a Client.
type Options struct {
	// Token is the bearer token: the API's read token for reads, its
	// write token for changes.
	Token string
	// TLSConfig verifies an https:// server (its RootCAs: the CA that
	// signed the API's certificate). Setting it makes a bare host:port
	// https. Ignored when HTTPClient is set.
	TLSConfig *tls.Config
	// HTTPClient sends the requests; nil: a client of its own with
	// Timeout and TLSConfig.
	HTTPClient *http.Client
	// Timeout bounds one request when HTTPClient is nil (DefaultTimeout
	// if zero; a context deadline bounds it too).
	Timeout time.Duration
	// Retries is how many times an idempotent call is retried after a
	// 502/503/504 or a connection error (DefaultRetries if zero; negative:
	// none).
	Retries int
	// Backoff is the first retry's delay, doubled each time, with jitter
	// (100ms if zero).
	Backoff time.Duration
}

// Client calls one server of the API. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	token   string
	hc      *http.Client
	retries int
	backoff time.Duration
	// keysHonoured is set once the server echoed an Idempotency-Key: it
	// deduplicates retries by request id (cluster version 5 servers), so
	// keyless enqueues may be retried too.
	keysHonoured *atomic.Bool
}

// New returns a client of the API at addr: host:port, http://host:port or
// https://host:port, optionally with a path prefix where the API is
// mounted.
func New(addr string, o Options) (*Client, error) {
	base := addr
	if !strings.Contains(base, "://") {
		if o.TLSConfig != nil {
			base = "https://" + base
		} else {
			base = "http://" + base
		}
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("client: address %q: want host:port, http://host:port or https://host:port", addr)
	}
	if o.TLSConfig != nil && u.Scheme != "https" && o.HTTPClient == nil {
		return nil, fmt.Errorf("client: a TLS config is set but %q is http://: use https://", addr)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if o.Token != "" {
		if err := apitypes.CheckToken(o.Token); err != nil {
			return nil, fmt.Errorf("client: token: %v", err)
		}
	}
	c := &Client{base: u, token: o.Token, hc: o.HTTPClient, retries: o.Retries, backoff: o.Backoff, keysHonoured: new(atomic.Bool)}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if o.TLSConfig != nil {
			tr.TLSClientConfig = o.TLSConfig.Clone()
		}
		timeout := o.Timeout
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		c.hc = &http.Client{Timeout: timeout, Transport: tr}
	}
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.backoff <= 0 {
		c.backoff = 100 * time.Millisecond
	}
	return c, nil
}

// Addr is the server's base URL.
func (c *Client) Addr() string { return c.base.String() }

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var v Status
	_, err := c.get(ctx, "/v1/status", nil, &v)
	return v, err
}

// Ready is GET /readyz: the health report, and whether the node can act
// (healthy or degraded). An unready node answers its report with ready
// false, not an error.
func (c *Client) Ready(ctx context.Context) (h Health, ready bool, err error) {
	code, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, &h, false, http.StatusServiceUnavailable)
	return h, err == nil && code == http.StatusOK, err
}

// Members is GET /v1/members, every page.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	return getAll(ctx, c, "/v1/members", nil, func(m Member) string { return m.ID })
}

// Elections is GET /v1/elections, every page.
func (c *Client) Elections(ctx context.Context) ([]Election, error) {
	return getAll(ctx, c, "/v1/elections", nil, func(e Election) string { return e.Name })
}

// ShardFilter filters Shards; zero values match everything.
type ShardFilter struct {
	Owner string
	State string // "unowned", "owned" or "revoking"
}

// Shards is GET /v1/shards, every page.
func (c *Client) Shards(ctx context.Context, f ShardFilter) ([]Shard, error) {
	q := url.Values{}
	if f.Owner != "" {
		q.Set("owner", f.Owner)
	}
	if f.State != "" {
		q.Set("state", f.State)
	}
	return getAll(ctx, c, "/v1/shards", q, func(s Shard) string { return strconv.FormatUint(uint64(s.Shard), 10) })
}

// Shard is GET /v1/shards/{id}.
func (c *Client) Shard(ctx context.Context, id uint32) (Shard, error) {
	var v Shard
	_, err := c.get(ctx, "/v1/shards/"+strconv.FormatUint(uint64(id), 10), nil, &v)
	return v, err
}

// Owner is GET /v1/owner?key=: the shard key hashes to and its committed
// owner as the server sees it.
func (c *Client) Owner(ctx context.Context, key string) (OwnerInfo, error) {
	var v OwnerInfo
	_, err := c.get(ctx, "/v1/owner", url.Values{"key": {key}}, &v)
	return v, err
}

// Moves is GET /v1/moves: recent ownership moves, newest first; limit <= 0
// asks for every one the server keeps.
func (c *Client) Moves(ctx context.Context, limit int) ([]Move, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var v []Move
	_, err := c.get(ctx, "/v1/moves", q, &v)
	return v, err
}

// EnqueueOption modifies one EnqueueJob call.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct{ key string }

// WithIdempotencyKey sends key as the call's Idempotency-Key (1 to 255
// printable ASCII bytes; a UUIDv4 is a good one) instead of a generated
// one: use it to retry a logical request across calls, processes or
// restarts. Within the server's session window every call with key
// answers the first one's result; the key with another body fails with
// ErrKeyReused (422).
func WithIdempotencyKey(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.key = key }
}

// NewIdempotencyKey returns a random key (128 bits from crypto/rand, hex).
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand.Read panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// EnqueueJob is POST /v1/jobs. created is false when the idempotency key
// matched a job already there, which is returned. Every call carries an
// Idempotency-Key — WithIdempotencyKey's, or one generated for this call —
// and its retries reuse it, so a server of cluster version 5 answers a
// retry with the first try's result: created is true only for the request
// that created the job, and a job without Key is created once. The call
// is retried when it has a Key (a duplicate is harmless everywhere) or
// once the server has shown it honours the header; otherwise it is sent
// once (a server of an older release ignores the header).
func (c *Client) EnqueueJob(ctx context.Context, req JobRequest, opts ...EnqueueOption) (job Job, created bool, err error) {
	var o enqueueOptions
	for _, f := range opts {
		f(&o)
	}
	if o.key == "" {
		o.key = NewIdempotencyKey()
	}
	reqHdr := http.Header{apitypes.HeaderIdempotencyKey: {o.key}}
	var hdr http.Header
	retry := req.Key != "" || c.keysHonoured.Load()
	code, err := c.sendH(ctx, http.MethodPost, "/v1/jobs", nil, req, &job, retry, reqHdr, &hdr)
	if hdr.Get(apitypes.HeaderIdempotencyKey) != "" {
		c.keysHonoured.Store(true)
	}
	return job, code == http.StatusCreated, err
}

// ReadOption modifies one read.
type ReadOption func(q url.Values)

// Consistent makes a read linearizable: the server waits until its replica
// applied every write committed before the request (a read barrier,
// ?consistent=true; cluster version 5) before it answers. Without it a
// read is the server's replica as it is, which may lag (docs/jobs.md).
func Consistent() ReadOption { return func(q url.Values) { q.Set("consistent", "true") } }

// Job is GET /v1/jobs/{id}.
func (c *Client) Job(ctx context.Context, id string, opts ...ReadOption) (Job, error) {
	var v Job
	q := url.Values{}
	for _, f := range opts {
		f(q)
	}
	_, err := c.get(ctx, "/v1/jobs/"+url.PathEscape(id), q, &v)
	return v, err
}

// JobFilter selects a page of jobs.
type JobFilter struct {
	Shard *uint32 // nil: every shard
	State string  // "": any state
	// Limit is the page size (the server's default, 100, if zero); After
	// is the previous page's Next.
	Limit int
	After string
	// Consistent asks for a linearizable page (see Consistent).
	Consistent bool
}

// Jobs is GET /v1/jobs: one page, sorted by id; its Next, when set, is the
// After of the next page. Counts count every state of the shard filter.
func (c *Client) Jobs(ctx context.Context, f JobFilter) (JobList, error) {
	q := url.Values{}
	if f.Shard != nil {
		q.Set("shard", strconv.FormatUint(uint64(*f.Shard), 10))
	}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.After != "" {
		q.Set("after", f.After)
	}
	if f.Consistent {
		q.Set("consistent", "true")
	}
	var v JobList
	_, err := c.get(ctx, "/v1/jobs", q, &v)
	return v, err
}

// AllJobs pages through Jobs until the last page.
func (c *Client) AllJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	var out []Job
	for {
		page, err := c.Jobs(ctx, f)
		if err != nil {
			return out, err
		}
		out = append(out, page.Jobs...)
		if page.Next == "" || page.Next == f.After {
			return out, nil
		}
		f.After = page.Next
	}
}

// Drain is POST /v1/drain?wait=: the server's node hands its shards over
// and answers once it acts on none (Done) or after wait (0: the server's
// default, 60s) with Done false. The request's timeout must outlast wait:
// a client timeout shorter than wait (or 60s) + 30s is raised to it for
// this call.
func (c *Client) Drain(ctx context.Context, wait time.Duration) (DrainResult, error) {
	var q url.Values
	if wait > 0 {
		q = url.Values{"wait": {wait.String()}}
	}
	cc := *c
	if need := max(wait, 60*time.Second) + 30*time.Second; cc.hc.Timeout > 0 && cc.hc.Timeout < need {
		hc := *cc.hc
		hc.Timeout = need
		cc.hc = &hc
	}
	var v DrainResult
	_, err := cc.do(ctx, http.MethodPost, "/v1/drain", q, nil, &v, true)
	return v, err
}

// Undrain is POST /v1/undrain.
func (c *Client) Undrain(ctx context.Context) (DrainResult, error) {
	var v DrainResult
	_, err := c.do(ctx, http.MethodPost, "/v1/undrain", nil, nil, &v, true)
	return v, err
}

// Keyring is GET /v1/keyring (the write token).
func (c *Client) Keyring(ctx context.Context) (Keyring, error) {
	var v Keyring
	_, err := c.get(ctx, "/v1/keyring", nil, &v)
	return v, err
}

// KeyringOp is POST /v1/keyring/{op}: op is install, use or remove; key is
// base64. It is not retried.
func (c *Client) KeyringOp(ctx context.Context, op, key string) (Keyring, error) {
	var v Keyring
	_, err := c.do(ctx, http.MethodPost, "/v1/keyring/"+url.PathEscape(op), nil, apitypes.KeyringRequest{Key: key}, &v, false)
	return v, err
}

// UpgradeStatus is GET /v1/upgrade.
func (c *Client) UpgradeStatus(ctx context.Context) (UpgradeStatus, error) {
	var v UpgradeStatus
	_, err := c.get(ctx, "/v1/upgrade", nil, &v)
	return v, err
}

// FinalizeUpgrade is POST /v1/upgrade/finalize (irreversible; not
// retried).
func (c *Client) FinalizeUpgrade(ctx context.Context) (UpgradeStatus, error) {
	var v UpgradeStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/upgrade/finalize", nil, nil, &v, false)
	return v, err
}

// PlacementRules is GET /v1/placement: the operator's pins and
// exclusions.
func (c *Client) PlacementRules(ctx context.Context) (PlacementRules, error) {
	var v PlacementRules
	_, err := c.get(ctx, "/v1/placement", nil, &v)
	return v, err
}

// Pin is POST /v1/placement/pin: pin shard to node (the write token). The
// control group moves the shard there and keeps it there while node is
// eligible. It returns the rules after the commit; retried (a pin is
// idempotent). A 409 means the cluster does not run version 3 yet.
func (c *Client) Pin(ctx context.Context, shard uint32, node, reason string) (PlacementRules, error) {
	var v PlacementRules
	_, err := c.do(ctx, http.MethodPost, "/v1/placement/pin", nil, apitypes.PinRequest{Shard: shard, Node: node, Reason: reason}, &v, true)
	return v, err
}

// Unpin removes shard's pin.
func (c *Client) Unpin(ctx context.Context, shard uint32) (PlacementRules, error) {
	return c.Pin(ctx, shard, "", "")
}

// Exclude is POST /v1/placement/exclude: exclude node from placement
// (exclude true: its shards move off) or lift its exclusion.
func (c *Client) Exclude(ctx context.Context, node string, exclude bool, reason string) (PlacementRules, error) {
	var v PlacementRules
	_, err := c.do(ctx, http.MethodPost, "/v1/placement/exclude", nil, apitypes.ExcludeRequest{Node: node, Exclude: exclude, Reason: reason}, &v, true)
	return v, err
}

// Revocations is GET /v1/revocations: the committed deny-list.
func (c *Client) Revocations(ctx context.Context) (Revocations, error) {
	var v Revocations
	_, err := c.get(ctx, "/v1/revocations", nil, &v)
	return v, err
}

// Revoke is POST /v1/revocations (the admin token): put node and/or a
// certificate serial on the deny-list, or lift that entry.
func (c *Client) Revoke(ctx context.Context, req apitypes.RevokeRequest) (Revocations, error) {
	var v Revocations
	_, err := c.do(ctx, http.MethodPost, "/v1/revocations", nil, req, &v, true)
	return v, err
}

// FencedPolicy is GET /v1/fenced: the shards under fenced takeover.
func (c *Client) FencedPolicy(ctx context.Context) (apitypes.FencedPolicy, error) {
	var v apitypes.FencedPolicy
	_, err := c.get(ctx, "/v1/fenced", nil, &v)
	return v, err
}

// SetFenced is POST /v1/fenced (the write token): put shards first..last
// under fenced takeover (fenced) or back under the lease rule. Fenced
// shards fail over without waiting out a dead owner's lease; S4 (no two
// owners act at once) is waived for them (docs/guarantees.md). It returns
// the policy after the commit; retried (idempotent). A 409 means the
// cluster does not run version 4 yet.
func (c *Client) SetFenced(ctx context.Context, first, last uint32, fenced bool) (apitypes.FencedPolicy, error) {
	var v apitypes.FencedPolicy
	_, err := c.do(ctx, http.MethodPost, "/v1/fenced", nil, apitypes.FencedRequest{First: first, Last: last, Fenced: fenced}, &v, true)
	return v, err
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) (int, error) {
	return c.do(ctx, http.MethodGet, path, q, nil, out, true)
}

// getAll follows ?after= cursors (the X-Next-After header) to the end.
func getAll[T any](ctx context.Context, c *Client, path string, q url.Values, key func(T) string) ([]T, error) {
	if q == nil {
		q = url.Values{}
	}
	var all []T
	for {
		var page []T
		hdr, err := c.getWithHeader(ctx, path, q, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		next := hdr.Get("X-Next-After")
		if next == "" || len(page) == 0 || next == q.Get("after") {
			return all, nil
		}
		q.Set("after", next)
	}
}

func (c *Client) getWithHeader(ctx context.Context, path string, q url.Values, out any) (http.Header, error) {
	var hdr http.Header
	_, err := c.send(ctx, http.MethodGet, path, q, nil, out, true, &hdr)
	return hdr, err
}

// do sends a request, retrying when idempotent, and decodes a 2xx answer
// (or one of okCodes) into out. It returns the status code.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any, idempotent bool, okCodes ...int) (int, error) {
	return c.send(ctx, method, path, q, body, out, idempotent, nil, okCodes...)
}

func (c *Client) send(ctx context.Context, method, path string, q url.Values, body, out any, idempotent bool, hdr *http.Header, okCodes ...int) (int, error) {
	return c.sendH(ctx, method, path, q, body, out, idempotent, nil, hdr, okCodes...)
}

// sendH is send with request headers reqHdr, the same on every retry.
func (c *Client) sendH(ctx context.Context, method, path string, q url.Values, body, out any, idempotent bool, reqHdr http.Header, hdr *http.Header, okCodes ...int) (int, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("client: encoding the request: %w", err)
		}
		payload = b
	}
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	attempts := 1
	if idempotent {
		attempts += c.retries
	}
	delay := c.backoff
	for i := 0; ; i++ {
		code, err := c.once(ctx, method, &u, payload, out, reqHdr, hdr, okCodes)
		if err == nil || i+1 >= attempts || !retryable(err) || ctx.Err() != nil {
			return code, err
		}
		d := delay/2 + rand.N(delay)
		var ae *APIError
		if errors.As(err, &ae) && ae.RetryAfter > d {
			d = min(ae.RetryAfter, 10*time.Second)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return code, err
		case <-t.C:
		}
		delay *= 2
	}
}

func (c *Client) once(ctx context.Context, method string, u *url.URL, payload []byte, out any, reqHdr http.Header, hdr *http.Header, okCodes []int) (int, error) {
	var r io.Reader
	if payload != nil {
		r = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if payload != nil || (method != http.MethodGet && method != http.MethodHead) {
		// The API refuses a state-changing request without it (a
		// browser cannot send it cross-origin without a preflight).
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range reqHdr {
		req.Header[k] = vs
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, &UnreachableError{Addr: c.base.String(), Err: err}
	}
	defer resp.Body.Close()
	if hdr != nil {
		*hdr = resp.Header
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, &UnreachableError{Addr: c.base.String(), Err: fmt.Errorf("reading the answer: %w", err)}
	}
	ok := resp.StatusCode < 300
	for _, c := range okCodes {
		ok = ok || resp.StatusCode == c
	}
	if !ok {
		return resp.StatusCode, newAPIError(resp, b)
	}
	if out != nil {
		if !isJSON(resp.Header.Get("Content-Type")) {
			return resp.StatusCode, fmt.Errorf("%w: %s%s answered %s, not JSON", ErrNotTenure, c.base, u.Path, orUnknown(resp.Header.Get("Content-Type")))
		}
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%w: decoding the answer of %s%s: %v", ErrNotTenure, c.base, u.Path, err)
		}
	}
	return resp.StatusCode, nil
}

func isJSON(ct string) bool {
	return ct == "" || strings.HasPrefix(ct, "application/json")
}

func orUnknown(s string) string {
	if s == "" {
		return "no content type"
	}
	return s
}

func retryable(err error) bool {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return true
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}
