package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/httpapi"
)

func init() {
	register("agent", "run one node: gossip, control group, HTTP API, dashboard, demo workload", runAgent)
}

// runningNode is a started node as the agent drives it.
type runningNode interface {
	actingSource
	// ID is the node id.
	ID() string
	// API returns the node's HTTP API (httpapi.New).
	API(o httpapi.Options) (*httpapi.Handler, error)
	// ProcessJobs starts and completes the runnable jobs of the shards the
	// node acts on (the demo workload's job handling).
	ProcessJobs(ctx context.Context)
	// Close drains the node (bounded by ctx), leaves the cluster and stops.
	Close(ctx context.Context) error
}

// startNode starts a node from the agent's config; it returns once the
// node is registered with the control group or ctx ends. nodeadapter.go
// wires it to package node; tests may replace it.
var startNode func(ctx context.Context, c agentConfig, log *slog.Logger) (runningNode, error)

func runAgent(ctx context.Context, m *Main, args []string) error {
	c, err := loadAgentConfig(args, m.getenv, m.Stderr)
	if err != nil {
		return err
	}
	log := newLogger(m.Stderr, c.LogFormat, c.LogLevel)
	insecureWarning, err := c.checkHTTPExposure()
	if err != nil {
		return err
	}
	if insecureWarning != "" {
		log.Warn(insecureWarning)
	}
	if startNode == nil {
		return errors.New("agent: this build has no node implementation")
	}
	metrics := newAgentMetrics()
	if err := httpapi.BridgeGoMetrics(metrics.reg); err != nil {
		return err
	}
	apiOpts := httpapi.Options{Token: c.Token, JobsToken: c.JobsToken, ReadToken: c.ReadToken, TokensFile: c.TokensFile,
		AllowedHosts: c.allowedHosts(), MetricsAuth: c.MetricsAuth, Registry: metrics.reg, Version: Version, Logger: log}

	// Serve HTTP before joining: liveness answers and readiness explains
	// while the node waits for its peers.
	var handler swapHandler
	handler.set(httpapi.StartingHandler(apiOpts))
	var srv *http.Server
	var httpAddr string
	httpTLS := c.HTTPTLSCert != ""
	if c.HTTPAddr != "" {
		var tlsCfg *tls.Config
		if httpTLS {
			if tlsCfg, err = httpTLSConfig(c.HTTPTLSCert, c.HTTPTLSKey, log); err != nil {
				return fmt.Errorf("agent: %w", err)
			}
		}
		ln, err := net.Listen("tcp", c.HTTPAddr)
		if err != nil {
			return fmt.Errorf("agent: http-addr: %w", err)
		}
		httpAddr = ln.Addr().String()
		srv = newHTTPServer(&handler, defaultHTTPLimits, tlsCfg, log)
		ln = limitPerClient(ln, c.HTTPMaxConnsPerClient, log)
		go func() {
			if err := serveHTTP(srv, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	log.Info("agent starting", "node", c.NodeID, "group", c.Group, "profile", c.Profile, "http", httpAddr,
		"gossip", c.GossipAddr, "raft", c.RaftAddr, "seeds", strings.Join(c.Seeds, ","), "bootstrap_expect", c.BootstrapExpect, "data_dir", c.DataDir)

	n, err := startNode(ctx, c, log)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped while joining the cluster")
			return nil
		}
		return fmt.Errorf("agent: start node: %w", err)
	}
	api, err := n.API(apiOpts)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), c.DrainOnStop)
		_ = n.Close(dctx)
		cancel()
		return fmt.Errorf("agent: http api: %w", err)
	}
	handler.set(api)

	runCtx, stopRun := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	var wit *witness
	if c.Witness != "" {
		wit = newWitness(c.Witness, log, metrics)
		goRun(func() { wit.run(runCtx) })
	}
	if len(c.FencedShards) > 0 {
		if fn, ok := n.(fencedNode); !ok {
			log.Error("fenced-shards: not applied: this node keeps no fenced-takeover policy")
		} else {
			goRun(func() {
				if err := ensureFenced(runCtx, fn, c.FencedShards, time.Second, log); err != nil && runCtx.Err() == nil {
					log.Error("fenced-shards: not applied", "err", err)
				}
			})
		}
	}
	if c.Workload {
		wl := &workload{src: n, node: n.ID(), every: c.TickEvery, sample: c.TickSample, witness: wit, metrics: metrics, jobs: n}
		goRun(func() { wl.run(runCtx) })
	}
	log.Info("agent running", "node", n.ID(), "http", httpAddr, "https", httpTLS, "auth", c.Token != "",
		"dashboard", dashboardURL(httpAddr, httpTLS))

	<-ctx.Done()
	log.Info("stopping: draining shards, then leaving", "drain_timeout", c.DrainOnStop)
	dctx, cancel := context.WithTimeout(context.Background(), c.DrainOnStop)
	closeErr := n.Close(dctx)
	cancel()
	stopRun()
	wg.Wait()
	_ = api.Close()
	if wit != nil {
		log.Info("witness totals", "sent", wit.sent.Load(), "dropped", wit.dropped.Load())
	}
	if closeErr != nil && !errors.Is(closeErr, context.DeadlineExceeded) {
		log.Warn("close", "err", closeErr)
		return fmt.Errorf("agent: close: %w", closeErr)
	}
	log.Info("agent stopped")
	return nil
}

// dashboardURL is the browser URL for an HTTP listen address.
func dashboardURL(addr string, https bool) string {
	if addr == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "http://"
	if https {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port) + "/"
}

// swapHandler serves whichever handler was set last.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// newLogger returns a slog logger writing text to a terminal and JSON
// otherwise (format "auto"), or the format asked for.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	lvl, err := parseLevel(level)
	if err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "text" || (format == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, errors.New("want debug, info, warn or error")
	}
	return l, nil
}
