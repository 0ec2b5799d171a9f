package route_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
	"github.com/tenurehq/tenure/route"
)

const partitions = 8

// served is what the application handler answers: who served the
// request and under which token.
type served struct {
	Node  string `json:"node"`
	Shard uint32 `json:"shard"`
	Epoch uint64 `json:"epoch"`
	Body  string `json:"body"`
}

// member is one real node on loopback with the API and the routed
// application mounted on one listener (its advertised HTTPAddr).
type member struct {
	n    *node.Node
	addr string
	srv  *http.Server
	// hold, when set, blocks the application handler until it is closed
	// and then runs after (a request in flight across a move).
	mu   sync.Mutex
	hold func(r *http.Request, tok node.Token)
	log  *servedLog
}

// servedLog records every (node, token) a request was served under.
type servedLog struct {
	mu sync.Mutex
	by map[node.Token]map[string]int
}

func (l *servedLog) add(id string, tok node.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by[tok] == nil {
		l.by[tok] = map[string]int{}
	}
	l.by[tok][id]++
}

// cluster starts three real nodes on loopback (fast profile) and waits for
// a settled placement over all three.
func cluster(t *testing.T, ctx context.Context) ([]*member, *servedLog) {
	t.Helper()
	log := &servedLog{by: map[node.Token]map[string]int{}}
	var lns []net.Listener
	var gossip, raft []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		gossip, raft = append(gossip, freePort(t)), append(raft, freePort(t))
	}
	ms := make([]*member, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		cfg := node.ConfigFromEnv(func(string) string { return "" })
		cfg.NodeID, cfg.Profile, cfg.Partitions, cfg.BootstrapExpect = fmt.Sprintf("n%d", i+1), node.ProfileFast, partitions, 3
		cfg.DataDir, cfg.GossipAddr, cfg.RaftAddr, cfg.Seeds = t.TempDir(), gossip[i], raft[i], slices.Clone(gossip)
		cfg.HTTPAddr = lns[i].Addr().String()
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.StateMachines = map[string]node.StateMachine{"note": nopSM{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := node.Start(ctx, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			ms[i] = &member{n: n, addr: cfg.HTTPAddr, log: log}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, m := range ms {
			if m == nil {
				continue
			}
			if m.srv != nil {
				_ = m.srv.Close()
			}
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = m.n.Close(cctx)
			cancel()
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		api, err := httpapi.New(m.n, httpapi.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = api.Close() })
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, ok := route.TokenFrom(r.Context())
			if !ok {
				http.Error(w, "no token in the context", 500)
				return
			}
			m.mu.Lock()
			hold := m.hold
			m.mu.Unlock()
			if hold != nil {
				hold(r, tok)
			}
			b, _ := io.ReadAll(r.Body)
			m.log.add(m.n.ID(), tok)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(served{Node: m.n.ID(), Shard: tok.Shard, Epoch: tok.Epoch, Body: string(b)})
		})
		rt, err := route.New(m.n, app, route.Options{
			Key:     func(r *http.Request) (string, error) { return r.PathValue("key"), nil },
			MaxBody: 1 << 10,
			Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/app/{key}", rt)
		mux.Handle("/", api)
		m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = m.srv.Serve(lns[i]) }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, m := range ms {
			ok = ok && len(m.n.Owned()) > 0
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the placement never reached every node")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, m := range ms {
		if err := m.n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return ms, log
}

type nopSM struct{}

func (nopSM) Apply(uint32, uint64, uint64, []byte) ([]byte, error) { return nil, nil }
func (nopSM) Snapshot() ([]byte, error)                            { return nil, nil }
func (nopSM) Restore([]byte) error                                 { return nil }

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
}

func send(t *testing.T, ctx context.Context, method, url, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func owner(ms []*member, key string) (*member, *member) {
	sh := ms[0].n.ShardFor(key)
	var own, other *member
	for _, m := range ms {
		if m.n.IsOwner(sh) {
			own = m
		} else if other == nil {
			other = m
		}
	}
	return own, other
}

// Every node serves a key's request by its owner: locally there, one hop
// from the others, with the owner's token in the handler's context; the
// client sends it straight to the owner.
func TestRouteToOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ms, _ := cluster(t, ctx)

	for k := range 12 {
		key := fmt.Sprintf("tenant-%d", k)
		own, _ := owner(ms, key)
		if own == nil {
			t.Fatalf("%s: no acting owner in a settled cluster", key)
		}
		tok, _ := own.n.Token(own.n.ShardFor(key))
		for _, m := range ms {
			a := send(t, ctx, "POST", "http://"+m.addr+"/app/"+key, "hello "+key)
			var s served
			if a.code != 200 || json.Unmarshal(a.body, &s) != nil {
				t.Fatalf("%s via %s: %d %s", key, m.n.ID(), a.code, a.body)
			}
			if s.Node != own.n.ID() || s.Epoch != tok.Epoch || s.Shard != tok.Shard || s.Body != "hello "+key {
				t.Fatalf("%s via %s: served %+v, want by %s at %s", key, m.n.ID(), s, own.n.ID(), tok)
			}
		}
		// OwnerAddr names the owner's advertised address from every node.
		for _, m := range ms {
			addr, otok, err := m.n.OwnerAddr(key)
			if err != nil || addr != own.addr || otok != tok {
				t.Fatalf("%s: OwnerAddr = %q %v %v, want %q %v", m.n.ID(), addr, otok, err, own.addr, tok)
			}
		}
	}

	// The client resolves the owner through any node's API and sends the
	// request straight there.
	c, err := client.New(ms[0].addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 6 {
		key := fmt.Sprintf("order-%d", k)
		own, _ := owner(ms, key)
		req, _ := http.NewRequest("PUT", "/app/"+key, strings.NewReader("body"))
		resp, err := c.Route(ctx, key, req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var s served
		if resp.StatusCode != 200 || json.Unmarshal(b, &s) != nil || s.Node != own.n.ID() || resp.Header.Get(apitypes.HeaderServedBy) != own.n.ID() {
			t.Fatalf("client.Route(%s): %d %s, want served by %s", key, resp.StatusCode, b, own.n.ID())
		}
	}
}

// Bad and stale routing headers are refused with a JSON error and never
// served or forwarded again.
func TestRouteRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ms, log := cluster(t, ctx)
	key := "tenant-x"
	own, other := owner(ms, key)
	sh := own.n.ShardFor(key)
	tok, _ := own.n.Token(sh)
	good := apitypes.FormatRouteToken(sh, tok.Epoch)
	stale := apitypes.FormatRouteToken(sh, tok.Epoch-1)
	if tok.Epoch == 1 {
		stale = apitypes.FormatRouteToken(sh, tok.Epoch+1)
	}
	for _, c := range []struct {
		name string
		to   *member
		body string
		hdr  []string
		code int
		err  string
	}{
		{"garbage token", own, "", []string{apitypes.HeaderToken, "x/y"}, 400, apitypes.RouteBadRequest},
		{"huge token", own, "", []string{apitypes.HeaderToken, strings.Repeat("9", 5000)}, 400, apitypes.RouteBadRequest},
		{"token of another shard", own, "", []string{apitypes.HeaderToken, apitypes.FormatRouteToken((sh+1)%partitions, tok.Epoch)}, 400, apitypes.RouteBadRequest},
		{"two tokens", own, "", []string{apitypes.HeaderToken, good, apitypes.HeaderToken, good}, 400, apitypes.RouteBadRequest},
		{"forwarded without a token", other, "", []string{apitypes.HeaderForwarded, "n9"}, 400, apitypes.RouteBadRequest},
		{"stale epoch at the owner", own, "", []string{apitypes.HeaderToken, stale}, 421, apitypes.RouteNotOwner},
		{"forwarded to a non-owner", other, "", []string{apitypes.HeaderToken, good, apitypes.HeaderForwarded, "n9"}, 421, apitypes.RouteNotOwner},
		{"token sent to a non-owner", other, "", []string{apitypes.HeaderToken, good}, 421, apitypes.RouteNotOwner},
		{"body too large to forward", other, strings.Repeat("b", 2<<10), nil, 413, apitypes.RouteTooLarge},
	} {
		a := send(t, ctx, "POST", "http://"+c.to.addr+"/app/"+key, c.body, c.hdr...)
		var e apitypes.RouteError
		if a.code != c.code || json.Unmarshal(a.body, &e) != nil || e.Code != c.err || e.Error == "" {
			t.Errorf("%s: %d %s, want %d %s", c.name, a.code, a.body, c.code, c.err)
		}
		if c.code == 421 && (e.Owner != own.n.ID() || e.HTTPAddr != own.addr || e.Epoch != tok.Epoch) {
			t.Errorf("%s: the refusal names %s at %s epoch %d, want %s at %s epoch %d", c.name, e.Owner, e.HTTPAddr, e.Epoch, own.n.ID(), own.addr, tok.Epoch)
		}
	}
	log.mu.Lock()
	servedAny := len(log.by) != 0
	log.mu.Unlock()
	if servedAny {
		t.Fatal("a refused request was served")
	}
	// The right token at the owner is served.
	if a := send(t, ctx, "GET", "http://"+own.addr+"/app/"+key, "", apitypes.HeaderToken, good); a.code != 200 {
		t.Fatalf("the owner's own token: %d %s", a.code, a.body)
	}
}

// Ownership moves while requests are in flight: a request held inside the
// owner's handler across a drain of that owner finds its token stale for
// fenced writes, no (shard, epoch) is ever served by two nodes, and
// requests through every node keep being served by the new owners.
func TestRouteMoveInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ms, log := cluster(t, ctx)
	key := "tenant-moving"
	own, other := owner(ms, key)

	// Hold one request inside the owner's handler.
	entered, release := make(chan node.Token, 1), make(chan struct{})
	fenced := make(chan error, 1)
	own.mu.Lock()
	own.hold = func(r *http.Request, tok node.Token) {
		if r.Header.Get("X-Hold") == "" {
			return
		}
		entered <- tok
		<-release
		_, err := own.n.Propose(r.Context(), tok, "note", []byte("late write"))
		fenced <- err
	}
	own.mu.Unlock()
	held := make(chan answer, 1)
	go func() {
		held <- send(t, ctx, "POST", "http://"+other.addr+"/app/"+key, "held", "X-Hold", "1")
	}()
	var heldTok node.Token
	select {
	case heldTok = <-entered:
	case <-ctx.Done():
		t.Fatal("the held request never reached the owner")
	}

	// Load through every node while the owner drains.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("load-%d-%d", i, j%16)
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+m.addr+"/app/"+k, strings.NewReader("x"))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	if err := own.n.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if own.n.IsOwner(heldTok.Shard) {
		t.Fatalf("%s still acts on shard %d after draining", own.n.ID(), heldTok.Shard)
	}
	close(release)
	a := <-held
	if err := <-fenced; !errors.Is(err, node.ErrStaleToken) && !errors.Is(err, node.ErrNotOwner) {
		t.Fatalf("a fenced write with the held token %s after the move: %v, want ErrStaleToken or ErrNotOwner", heldTok, err)
	}
	if a.code != 200 {
		t.Fatalf("the held request: %d %s", a.code, a.body)
	}

	// After the move the key is served by its new owner through every node.
	var newOwner *member
	sub := other.n.Subscribe(64) // wake on ownership changes rather than poll
	defer sub.Close()
	deadline := time.After(20 * time.Second)
	for newOwner == nil {
		if n, _ := owner(ms, key); n != nil && n != own {
			newOwner = n
			break
		}
		select {
		case <-sub.C():
		case <-time.After(100 * time.Millisecond): // acting starts on the owner's own lease, not an event here
		case <-deadline:
			t.Fatal("no new owner after the drain")
		}
	}
	for _, m := range ms {
		b := send(t, ctx, "GET", "http://"+m.addr+"/app/"+key, "")
		var s served
		if b.code != 200 || json.Unmarshal(b.body, &s) != nil || s.Node != newOwner.n.ID() || s.Epoch <= heldTok.Epoch {
			t.Fatalf("after the move via %s: %d %s, want served by %s past epoch %d", m.n.ID(), b.code, b.body, newOwner.n.ID(), heldTok.Epoch)
		}
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	t.Logf("answers during the drain: %v", codes)
	for code := range codes {
		if code != 200 && code != 421 && code != 503 {
			t.Errorf("answer %d during the move: want only 200, 421 or 503", code)
		}
	}
	if codes[200] == 0 {
		t.Error("nothing was served during the move")
	}
	mu.Unlock()
	log.mu.Lock()
	defer log.mu.Unlock()
	for tok, by := range log.by {
		if len(by) > 1 {
			t.Errorf("token %s served by %d nodes: %v", tok, len(by), by)
		}
	}
}
