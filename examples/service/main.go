// Command service is a small sharded service built on tenure, run as
// several processes on one machine:
//
//   - per-shard workers (node.RunPerShard) that write a heartbeat row for
//     their shard and ship the orders queued on it, every write fenced by
//     the shard's token in a shared SQLite database (store.go);
//   - a leader-only task (an election) that writes its own fenced row;
//   - jobs: POST /orders/{key} is routed to the key's owner (package
//     route), which records the order with its token and enqueues a
//     "ship" job that the shard's worker runs;
//   - tenure's API, /metrics and the dashboard (package httpapi) on the
//     same mux.
//
// Three processes on loopback:
//
//	go run ./service -id s1 -http 127.0.0.1:8101 -gossip 127.0.0.1:8201 -raft 127.0.0.1:8301 \
//	  -seeds 127.0.0.1:8201,127.0.0.1:8202,127.0.0.1:8203 -data /tmp/s1 -db /tmp/orders.db
//	(and s2, s3 with their own ports and data dirs, the same -seeds and -db)
//	curl -X POST localhost:8101/orders/o-1
//	go run ../cmd/tenure status --addr 127.0.0.1:8102
//
// Kill one with kill -9: its shards fail over within about a lease and
// the others carry on; the store refuses any write from an older epoch.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/node"
	"github.com/tenurehq/tenure/route"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

// tick is how often a shard's worker writes and looks for jobs.
const tick = 100 * time.Millisecond

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	id := fs.String("id", "", "node id (required)")
	httpAddr := fs.String("http", "127.0.0.1:0", "host:port of the service's HTTP listener")
	gossip := fs.String("gossip", "", "gossip host:port (required)")
	raft := fs.String("raft", "", "Raft host:port (required)")
	seeds := fs.String("seeds", "", "comma-separated gossip addresses of the peers")
	data := fs.String("data", "", "data directory (required)")
	dbPath := fs.String("db", "", "SQLite database shared by the processes (required)")
	expect := fs.Int("expect", 3, "control-group voters to wait for")
	partitions := fs.Int("partitions", 16, "shards")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" || *gossip == "" || *raft == "" || *data == "" || *dbPath == "" {
		return errors.New("-id, -gossip, -raft, -data and -db are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", *id)

	st, err := OpenStore(*dbPath)
	if err != nil {
		return err
	}
	defer st.Close()

	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	cfg := node.ConfigFromEnv(func(string) string { return "" })
	cfg.NodeID, cfg.DataDir, cfg.BootstrapExpect, cfg.Partitions = *id, *data, *expect, *partitions
	cfg.Profile = node.ProfileFast
	cfg.GossipAddr, cfg.RaftAddr = *gossip, *raft
	cfg.HTTPAddr = ln.Addr().String() // gossiped: route and client find owners by it
	if *seeds != "" {
		cfg.Seeds = strings.Split(*seeds, ",")
	}
	cfg.Logger = log.With("component", "tenure")
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Close(cctx)
	}()

	api, err := httpapi.New(n, httpapi.Options{Logger: log})
	if err != nil {
		return err
	}
	defer api.Close()
	orders, err := route.New(n, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acceptOrder(w, r, n, st)
	}), route.Options{Key: func(r *http.Request) (string, error) { return r.PathValue("key"), nil }, Logger: log})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{key}", orders)
	mux.Handle("/", api)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	log.Info("service running", "http", ln.Addr().String())

	go func() {
		// The leader-only task: one node at a time, fenced like the rest.
		err := n.RunLeader(ctx, n.Election("reporter"), func(ctx context.Context, tok node.Token) error {
			log.Info("leading the reporter election", "token", tok.String())
			return every(ctx, 300*time.Millisecond, func() error {
				return st.Fenced(ctx, tok, *id, "report", nil)
			})
		})
		if err != nil && ctx.Err() == nil {
			log.Error("leader task", "err", err)
		}
	}()
	err = n.RunPerShard(ctx, func(ctx context.Context, tok node.Token) error {
		return every(ctx, tick, func() error { return work(ctx, n, st, *id, tok) })
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// every runs f every d until ctx ends or the store refuses the token
// (then this term is over: a newer owner exists).
func every(ctx context.Context, d time.Duration, f func() error) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		if err := f(); errors.Is(err, ErrStaleToken) {
			return nil
		} else if err != nil && ctx.Err() == nil {
			slog.Warn("work", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// work is one round of a shard's worker: a fenced heartbeat row, then the
// shard's runnable jobs.
func work(ctx context.Context, n *node.Node, st *Store, id string, tok node.Token) error {
	if err := st.Fenced(ctx, tok, id, "tick", nil); err != nil {
		return err
	}
	for _, j := range n.RunnableJobs(tok.Shard) {
		j, err := n.StartJob(ctx, tok, j)
		if err != nil {
			continue // someone else's attempt, or the shard moved
		}
		err = st.Fenced(ctx, tok, id, "ship "+j.Key, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE orders SET ships = ships + 1, shipped_by = ?, shipped_epoch = ? WHERE key = ? AND shipped_by IS NULL`,
				id, tok.Epoch, string(j.Payload))
			return err
		})
		if err != nil {
			return err
		}
		if _, err := n.CompleteJob(ctx, j, nil); err != nil && ctx.Err() == nil {
			slog.Warn("complete job", "job", j.ID, "err", err)
		}
	}
	return nil
}

// acceptOrder runs on the owner of the order's key (route forwards it
// there): it records the order with the request's token and enqueues the
// job that ships it, idempotently (same key, one job).
func acceptOrder(w http.ResponseWriter, r *http.Request, n *node.Node, st *Store) {
	tok, _ := route.TokenFrom(r.Context())
	key := r.PathValue("key")
	err := st.Fenced(r.Context(), tok, n.ID(), "accept "+key, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(r.Context(), `INSERT OR IGNORE INTO orders(key, shard, accepted_by, accepted_epoch) VALUES (?, ?, ?, ?)`,
			key, tok.Shard, n.ID(), tok.Epoch)
		return err
	})
	if errors.Is(err, ErrStaleToken) {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	job, _, err := n.Enqueue(r.Context(), node.JobSpec{Key: "ship/" + key, ShardKey: key, Type: "ship", Payload: []byte(key)})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"order\":%q,\"job\":%d,\"token\":%q,\"node\":%q}\n", key, job.ID, tok.String(), n.ID())
}
