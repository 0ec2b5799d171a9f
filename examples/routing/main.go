// Command routing shows request routing to a key's owner: three nodes on
// loopback, in one process for brevity (a real fleet runs one per
// process, as in ../service), each serving
//
//	POST /counters/{key}   increment the key's counter
//
// through route.New. A counter lives only in the memory of its shard's
// owner, so the answers are right only if every request reaches the
// owner: route forwards a request that lands elsewhere (one hop, with the
// owner's fencing token, which the owner checks), and client.Route sends
// it straight to the owner. The program sends requests to every node in
// turn and prints who served them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/node"
	"github.com/tenurehq/tenure/route"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, os.Stdout, 5, 4); err != nil {
		fmt.Fprintln(os.Stderr, "routing:", err)
		os.Exit(1)
	}
}

// Answer is what POST /counters/{key} returns.
type Answer struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
	Node  string `json:"node"`
	Token string `json:"token"`
}

// counters is one node's in-memory state: the counters of the shards it
// owns. A counter restarts from zero on a new owner, which is fine for a
// demo; keep real state in a store fenced by the token (../service).
type counters struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counters) handler(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := route.TokenFrom(r.Context())
		key := r.PathValue("key")
		c.mu.Lock()
		c.n[key]++
		v := c.n[key]
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Answer{Key: key, Count: v, Node: id, Token: tok.String()})
	})
}

// run starts three nodes, sends rounds × keys increments round-robin over
// the nodes (and one more per key through client.Route), prints every
// answer and returns them.
func run(ctx context.Context, out io.Writer, keys, rounds int) ([]Answer, error) {
	type member struct {
		n    *node.Node
		addr string
	}
	var ms []member
	var lns []net.Listener
	var gossip []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		lns = append(lns, ln)
		g, err := freeAddr()
		if err != nil {
			return nil, err
		}
		gossip = append(gossip, g)
	}
	dir, err := os.MkdirTemp("", "tenure-routing-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	nodes := make([]*node.Node, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		raft, err := freeAddr()
		if err != nil {
			return nil, err
		}
		cfg := node.ConfigFromEnv(func(string) string { return "" })
		cfg.NodeID, cfg.Profile, cfg.Partitions, cfg.BootstrapExpect = fmt.Sprintf("r%d", i+1), node.ProfileFast, 8, 3
		cfg.DataDir = fmt.Sprintf("%s/r%d", dir, i+1)
		cfg.GossipAddr, cfg.RaftAddr, cfg.Seeds = gossip[i], raft, gossip
		cfg.HTTPAddr = lns[i].Addr().String()
		cfg.Logger = slog.New(slog.DiscardHandler)
		wg.Add(1)
		go func() { defer wg.Done(); nodes[i], errs[i] = node.Start(ctx, cfg) }()
	}
	wg.Wait()
	defer func() {
		for _, n := range nodes {
			if n != nil {
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = n.Close(cctx)
				cancel()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, n := range nodes {
		api, err := httpapi.New(n, httpapi.Options{})
		if err != nil {
			return nil, err
		}
		defer api.Close()
		rt, err := route.New(n, (&counters{n: map[string]int{}}).handler(n.ID()), route.Options{
			Key: func(r *http.Request) (string, error) { return r.PathValue("key"), nil },
		})
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("POST /counters/{key}", rt)
		mux.Handle("/", api) // client.Route asks /v1/owner
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lns[i]) }()
		defer srv.Close()
		ms = append(ms, member{n, lns[i].Addr().String()})
	}
	// Start from the balanced placement: the first node gets every shard
	// at first and hands some over once the others have been eligible for
	// a moment; a counter would restart on its new owner.
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for balanced := false; !balanced; {
		balanced = true
		for _, m := range ms {
			balanced = balanced && len(m.n.Owned()) > 0
		}
		if balanced {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for every node to own a shard: %w", ctx.Err())
		case <-tk.C:
		}
	}
	for _, m := range ms {
		if err := m.n.WaitSettled(ctx); err != nil {
			return nil, err
		}
	}

	var answers []Answer
	decode := func(resp *http.Response, err error) error {
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		}
		var a Answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			return err
		}
		answers = append(answers, a)
		return nil
	}
	for r := range rounds {
		for k := range keys {
			m := ms[(r+k)%len(ms)]
			key := fmt.Sprintf("tenant-%d", k)
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+m.addr+"/counters/"+key, nil)
			if err := decode(http.DefaultClient.Do(req)); err != nil {
				return answers, fmt.Errorf("%s via %s: %w", key, m.n.ID(), err)
			}
			a := answers[len(answers)-1]
			fmt.Fprintf(out, "%-9s sent to %s  served by %s  token %-5s count %d\n", key, m.n.ID(), a.Node, a.Token, a.Count)
		}
	}
	// A process that is not a member: the client asks any node for the
	// owner and sends the request straight there.
	c, err := client.New(ms[0].addr, client.Options{})
	if err != nil {
		return answers, err
	}
	for k := range keys {
		key := fmt.Sprintf("tenant-%d", k)
		req, _ := http.NewRequest("POST", "/counters/"+key, nil)
		if err := decode(c.Route(ctx, key, req)); err != nil {
			return answers, fmt.Errorf("client.Route %s: %w", key, err)
		}
		a := answers[len(answers)-1]
		fmt.Fprintf(out, "%-9s client.Route     served by %s  token %-5s count %d\n", key, a.Node, a.Token, a.Count)
	}
	return answers, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
