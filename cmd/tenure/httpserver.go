package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/tenurehq/tenure/certs"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// The agent's HTTP server: timeouts, header and connection limits, HTTPS.

// HTTP server limits.
const (
	defaultMaxConnsPerClient = 64
	defaultMaxPendingJobs    = 10000
)

// httpLimits are the server's timeouts and sizes. Requests that need
// longer (POST /v1/drain?wait=) extend their own deadlines with
// http.ResponseController.
type httpLimits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
}

var defaultHTTPLimits = httpLimits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       30 * time.Second,
	WriteTimeout:      30 * time.Second,
	IdleTimeout:       2 * time.Minute,
	MaxHeaderBytes:    64 << 10,
}

// writeJSON answers v as JSON (the demo's and the witness's own
// endpoints; the API's are httpapi's).
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apitypes.ErrorBody{Error: msg})
}

// newHTTPServer returns the server with its limits; tlsCfg, if set, makes
// it serve HTTPS (use serveHTTP).
func newHTTPServer(h http.Handler, lim httpLimits, tlsCfg *tls.Config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		TLSConfig:         tlsCfg,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serveHTTP serves srv on ln, with TLS when srv has a TLS config.
func serveHTTP(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// httpTLSConfig is the API's HTTPS config: TLS 1.2 or newer, the key pair
// re-read from disk when it changes (certs.Reloader, like the Raft port's).
func httpTLSConfig(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	r, err := certs.NewKeyPairReloader(certFile, keyFile, log)
	if err != nil {
		return nil, fmt.Errorf("http-tls-cert/http-tls-key: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}, nil
}

// isLoopbackAddr reports whether a listen address host:port binds only
// loopback: localhost or a loopback IP. An empty host (all interfaces)
// or any other name is not.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkHTTPExposure refuses an HTTP API reachable off this host without a
// token, unless --http-insecure says so; warn is set when the agent runs
// open that way and must say so loudly.
func (c agentConfig) checkHTTPExposure() (warn string, err error) {
	if c.HTTPAddr == "" || c.Token != "" || c.TokensFile != "" || isLoopbackAddr(c.HTTPAddr) {
		return "", nil
	}
	if !c.HTTPInsecure {
		return "", fmt.Errorf("agent: http-addr %s is not loopback and no --token is set: anyone who reaches it could read job payloads, enqueue jobs and drain the node. "+
			"Set --token-file (or --token / TENURE_TOKEN, and --read-token for read-only clients), bind --http-addr to 127.0.0.1, "+
			"or pass --http-insecure to run it open anyway", c.HTTPAddr)
	}
	return fmt.Sprintf("INSECURE: the HTTP API on %s is open to anyone who reaches it (--http-insecure, no --token): job payloads and results are readable, jobs can be enqueued and the node drained", c.HTTPAddr), nil
}

// perClientListener caps the connections one client IP holds open: a
// connection over the cap is closed as soon as it is accepted.
type perClientListener struct {
	net.Listener
	max int
	log *slog.Logger

	mu         sync.Mutex
	open       map[string]int
	lastLogged time.Time
	refused    int
}

func limitPerClient(ln net.Listener, max int, log *slog.Logger) net.Listener {
	if max <= 0 {
		return ln
	}
	return &perClientListener{Listener: ln, max: max, log: log, open: map[string]int{}}
}

func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

func (l *perClientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientIP(c.RemoteAddr())
		l.mu.Lock()
		if l.open[ip] >= l.max {
			l.refused++
			logNow := time.Since(l.lastLogged) >= time.Second
			refused := l.refused
			if logNow {
				l.lastLogged, l.refused = time.Now(), 0
			}
			l.mu.Unlock()
			_ = c.Close()
			if logNow && l.log != nil {
				l.log.Warn("http: client over its connection cap; closing new connections", "client", ip, "max", l.max, "refused", refused)
			}
			continue
		}
		l.open[ip]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *perClientListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// openConns is the number of open connections of ip (tests).
func (l *perClientListener) openConns(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip]
}

// countedConn gives its slot back once, on the first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// allowedHosts are the Host names the API answers to (httpapi.Options.
// AllowedHosts) besides IP literals and localhost: the agent's own
// addresses (HTTP, gossip and Raft, bind and advertise), its node id and
// host name, and --http-allowed-hosts.
func (c agentConfig) allowedHosts() []string {
	out := append([]string(nil), c.HTTPAllowedHosts...)
	for _, a := range []string{c.HTTPAddr, c.GossipAddr, c.GossipAdvertise, c.RaftAddr, c.RaftAdvertise} {
		if a == "" {
			continue
		}
		if h, _, err := net.SplitHostPort(a); err == nil {
			a = h
		}
		out = append(out, a)
	}
	out = append(out, c.NodeID)
	if h, err := os.Hostname(); err == nil {
		out = append(out, h)
	}
	return out
}
