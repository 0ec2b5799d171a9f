package route

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// Errors of the package. The middleware answers them as JSON; New returns
// ErrInvalidOptions.
var (
	// ErrInvalidOptions: New was given unusable Options; the message names
	// the field.
	ErrInvalidOptions = errors.New("route: invalid options")
	// ErrNoKey: Options.Key could not extract a key (the middleware
	// answers 400 with the key function's error).
	ErrNoKey = errors.New("route: no key")
)

// Defaults of Options.
const (
	// DefaultMaxBody bounds the body of a request this node forwards (it is
	// buffered so that a refused forward can be answered cleanly).
	DefaultMaxBody = 1 << 20
	// DefaultTimeout bounds one forwarded exchange (request and answer).
	DefaultTimeout = 10 * time.Second
	// retryAfter is the Retry-After of a 503: about one fast lease, the
	// time a failover or handoff takes to settle.
	retryAfter = 1
)

// KeyFunc extracts the routing key from a request, e.g. a path value or a
// header. It must not read the body. An error (or an empty key) is
// answered 400 with the error's text.
type KeyFunc func(r *http.Request) (string, error)

// Options configures the middleware.
type Options struct {
	// Key extracts the routing key; required.
	Key KeyFunc
	// MaxBody bounds a forwarded request's body (DefaultMaxBody if 0);
	// a larger one is answered 413. Requests served locally are not
	// buffered and not bounded here.
	MaxBody int64
	// Timeout bounds one forwarded exchange (DefaultTimeout if 0); the
	// incoming request's context bounds it too.
	Timeout time.Duration
	// Transport sends forwarded requests (a clone of
	// http.DefaultTransport if nil); give it the TLS config the owners'
	// listeners need.
	Transport http.RoundTripper
	// Scheme of the owners' addresses: "http" (default) or "https".
	Scheme string
	// Logger receives forwarding failures (slog.Default if nil).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxBody == 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate reports unusable options.
func (o Options) Validate() error {
	var errs []error
	if o.Key == nil {
		errs = append(errs, errors.New("option Key: nil, want a function"))
	}
	if o.MaxBody < 0 {
		errs = append(errs, fmt.Errorf("option MaxBody %d: want >= 0", o.MaxBody))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("option Timeout %v: want >= 0", o.Timeout))
	}
	if o.Scheme != "" && o.Scheme != "http" && o.Scheme != "https" {
		errs = append(errs, fmt.Errorf("option Scheme %q: want http or https", o.Scheme))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}

// Node is what the middleware needs of a node; *node.Node implements it.
type Node interface {
	ID() string
	ShardFor(key string) uint32
	Token(shard uint32) (node.Token, error)
	Shard(shard uint32) node.ShardInfo
	OwnerAddr(key string) (string, node.Token, error)
}

var _ Node = (*node.Node)(nil)

type tokenKey struct{}

// TokenFrom returns the fencing token a request is being served under:
// the (shard, epoch) this node acted on when the middleware let the
// request through. Pass it with every write the handler makes so the
// store refuses it once the shard has moved on (see docs/api.md).
func TokenFrom(ctx context.Context) (node.Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(node.Token)
	return t, ok
}

type targetKey struct{}

type target struct {
	addr string
	tok  node.Token
}

type handler struct {
	n     Node
	next  http.Handler
	o     Options
	proxy *httputil.ReverseProxy
}

// New returns the routing middleware around next.
func New(n Node, next http.Handler, o Options) (http.Handler, error) {
	if n == nil || next == nil {
		return nil, fmt.Errorf("%w: nil node or handler", ErrInvalidOptions)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	h := &handler{n: n, next: next, o: o.withDefaults()}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL.Scheme = h.o.Scheme
			pr.Out.URL.Host = t.addr
			pr.Out.Host = ""
			pr.SetXForwarded()
			pr.Out.Header.Set(apitypes.HeaderToken, apitypes.FormatRouteToken(t.tok.Shard, t.tok.Epoch))
			pr.Out.Header.Set(apitypes.HeaderForwarded, h.n.ID())
		},
		Transport: h.o.Transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(targetKey{}).(target)
			if r.Context().Err() != nil && errors.Is(context.Cause(r.Context()), context.Canceled) {
				return // the caller went away; nobody reads the answer
			}
			h.o.Logger.Warn("route: forwarding to the owner failed", "shard", t.tok.Shard, "epoch", t.tok.Epoch, "addr", t.addr, "err", err)
			h.refuse(w, http.StatusServiceUnavailable, apitypes.RouteNoOwner, t.tok.Shard,
				fmt.Sprintf("forwarding to the owner of shard %d at %s: %v", t.tok.Shard, t.addr, err))
		},
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := h.o.Key(r)
	if err == nil && key == "" {
		err = ErrNoKey
	}
	if err == nil && len(key) > node.MaxStringLen {
		err = fmt.Errorf("key of %d bytes: want at most %d", len(key), node.MaxStringLen)
	}
	if err != nil {
		h.refuse(w, http.StatusBadRequest, apitypes.RouteBadRequest, 0, fmt.Sprintf("routing key: %v", err))
		return
	}
	shard := h.n.ShardFor(key)
	toks, fwds := r.Header.Values(apitypes.HeaderToken), r.Header.Values(apitypes.HeaderForwarded)
	if len(toks) > 1 || len(fwds) > 1 {
		h.refuse(w, http.StatusBadRequest, apitypes.RouteBadRequest, shard, fmt.Sprintf("more than one %s or %s header", apitypes.HeaderToken, apitypes.HeaderForwarded))
		return
	}
	if len(fwds) == 1 && (len(fwds[0]) > apitypes.MaxForwardedHeader || len(toks) == 0) {
		h.refuse(w, http.StatusBadRequest, apitypes.RouteBadRequest, shard, fmt.Sprintf("%s: want a node id of at most %d bytes, with a %s", apitypes.HeaderForwarded, apitypes.MaxForwardedHeader, apitypes.HeaderToken))
		return
	}
	if len(toks) == 1 {
		// Sent to this node as the owner: serve only at exactly that token.
		s, e, err := apitypes.ParseRouteToken(toks[0])
		if err != nil {
			h.refuse(w, http.StatusBadRequest, apitypes.RouteBadRequest, shard, err.Error())
			return
		}
		if s != shard {
			h.refuse(w, http.StatusBadRequest, apitypes.RouteBadRequest, shard, fmt.Sprintf("%s names shard %d but the key hashes to shard %d", apitypes.HeaderToken, s, shard))
			return
		}
		mine, err := h.n.Token(shard)
		if err != nil || mine.Epoch != e {
			h.misdirected(w, key, shard, e, mine)
			return
		}
		h.serve(w, r, mine)
		return
	}
	if mine, err := h.n.Token(shard); err == nil {
		h.serve(w, r, mine)
		return
	}
	addr, tok, err := h.n.OwnerAddr(key)
	if err == nil && h.n.Shard(shard).Owner == h.n.ID() {
		// Committed to this node but it does not act (lease not yet
		// valid, or handing the shard over): forwarding would come back.
		err = fmt.Errorf("this node is the committed owner of shard %d at epoch %d but does not act on it now (lease pending or handoff in progress)", shard, tok.Epoch)
	}
	if err != nil {
		h.refuse(w, http.StatusServiceUnavailable, apitypes.RouteNoOwner, shard, err.Error())
		return
	}
	if r.ContentLength > h.o.MaxBody {
		h.refuse(w, http.StatusRequestEntityTooLarge, apitypes.RouteTooLarge, shard, fmt.Sprintf("body of %d bytes: at most %d can be forwarded", r.ContentLength, h.o.MaxBody))
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, h.o.MaxBody+1))
		if err != nil {
			h.refuse(w, http.StatusBadRequest, apitypes.RouteBadRequest, shard, fmt.Sprintf("reading the body: %v", err))
			return
		}
		if int64(len(b)) > h.o.MaxBody {
			h.refuse(w, http.StatusRequestEntityTooLarge, apitypes.RouteTooLarge, shard, fmt.Sprintf("body over %d bytes: too large to forward", h.o.MaxBody))
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	ctx = context.WithValue(ctx, targetKey{}, target{addr: addr, tok: tok})
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, tok node.Token) {
	w.Header().Set(apitypes.HeaderServedBy, h.n.ID())
	h.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
}

// misdirected refuses a request whose token this node does not hold now.
func (h *handler) misdirected(w http.ResponseWriter, key string, shard uint32, want uint64, mine node.Token) {
	msg := fmt.Sprintf("%s does not act on shard %d at epoch %d", h.n.ID(), shard, want)
	if !mine.IsZero() {
		msg += fmt.Sprintf(" (it acts at epoch %d)", mine.Epoch)
	}
	e := apitypes.RouteError{Error: msg, Code: apitypes.RouteNotOwner, Shard: shard}
	if addr, tok, err := h.n.OwnerAddr(key); err == nil {
		e.Owner, e.Epoch, e.HTTPAddr = h.n.Shard(shard).Owner, tok.Epoch, addr
	}
	writeJSON(w, h.n.ID(), http.StatusMisdirectedRequest, e)
}

func (h *handler) refuse(w http.ResponseWriter, status int, code string, shard uint32, msg string) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeJSON(w, h.n.ID(), status, apitypes.RouteError{Error: msg, Code: code, Shard: shard})
}

func writeJSON(w http.ResponseWriter, id string, status int, v apitypes.RouteError) {
	w.Header().Set(apitypes.HeaderServedBy, id)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
