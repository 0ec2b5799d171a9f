package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"
	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/node"
)

// Agent defaults beyond node.DefaultConfig's.
const (
	defaultDrainOnStop = 30 * time.Second
	defaultDataDir     = "tenure-data"
	defaultJobTimeout  = node.DefaultJobTimeout
	envPrefix          = "TENURE"
)

// agentConfig is everything `tenure agent` is configured with: the node's
// settings (node.Config, whose flags come from node.Config.RegisterFlags)
// and the agent's own (HTTP server, demo workload, logs, shutdown). Values
// come from, in increasing precedence: defaults (HOSTNAME and CLUSTER_NAME
// for the identity, node.ConfigFromEnv), the config file (--config or
// TENURE_CONFIG), the environment (TENURE_<FLAG>) and the command line;
// github.com/peterbourgon/ff layers them.
type agentConfig struct {
	node.Config

	// HTTP API tokens (admin scope, jobs scope, read scope) or the files
	// holding them, and a tokens file re-read on change.
	Token         string
	JobsToken     string
	ReadToken     string
	TokenFile     string
	JobsTokenFile string
	ReadTokenFile string
	TokensFile    string
	// HTTPAllowedHosts are the Host names the API answers to besides IP
	// literals, localhost and the agent's own addresses.
	HTTPAllowedHosts []string
	// HTTPInsecure allows a non-loopback HTTP API without a token.
	HTTPInsecure bool
	// MetricsAuth puts /metrics under the read scope.
	MetricsAuth bool
	// HTTPS on the API: certificate and key files, re-read on change.
	HTTPTLSCert string
	HTTPTLSKey  string
	// HTTPMaxConnsPerClient caps open HTTP connections per client IP (0: none).
	HTTPMaxConnsPerClient int
	Witness               string
	Workload              bool
	TickEvery             time.Duration
	TickSample            time.Duration
	DrainOnStop           time.Duration
	LogFormat             string // auto, text, json
	LogLevel              string // debug, info, warn, error
	// FencedShards are the shards the agent puts under fenced takeover
	// once the cluster version allows it (agentfenced.go).
	FencedShards shardRangesFlag
}

// defaultAgentConfig returns the defaults before file, env and flags, with
// the identity read through getenv (HOSTNAME, CLUSTER_NAME).
func defaultAgentConfig(getenv func(string) string) agentConfig {
	nc := node.ConfigFromEnv(getenv)
	nc.DataDir = defaultDataDir
	// The agent listens on HTTPAddr and advertises it (nodeConfig).
	nc.HTTPAddr = "0.0.0.0:" + strconv.Itoa(defaultHTTPPort)
	nc.JobTimeout = defaultJobTimeout
	nc.MaxPendingJobs = defaultMaxPendingJobs
	nc.Voter = node.VoterAuto
	return agentConfig{
		Config:                nc,
		Workload:              true,
		TickEvery:             defaultTickEvery,
		DrainOnStop:           defaultDrainOnStop,
		LogFormat:             "auto",
		LogLevel:              "info",
		HTTPMaxConnsPerClient: defaultMaxConnsPerClient,
	}
}

// agentFlags declares every agent setting on fs, bound to c: the node's
// flags (node.Config.RegisterFlags), then the agent's own.
func agentFlags(fs *flag.FlagSet, c *agentConfig) {
	c.Config.RegisterFlags(fs)
	// The agent listens on --http-addr (node.Config only advertises it).
	fs.Lookup("http-addr").Usage = "host:port the HTTP API, metrics and dashboard listen on, advertised to the other nodes (empty: none)"
	// --encrypt is the agent's historical name of --encrypt-key.
	key := fs.Lookup("encrypt-key")
	fs.Var(key.Value, "encrypt", key.Usage+" (the same as --encrypt-key)")
	fs.StringVar(&c.Token, "token", c.Token, "bearer token of the HTTP API's write scope (every endpoint); with it set every /v1 endpoint needs a token. Prefer --token-file: argv is visible to other users")
	fs.StringVar(&c.ReadToken, "read-token", c.ReadToken, "bearer token of the HTTP API's read scope: GETs, job payloads and results included (needs --token)")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file holding the write token (instead of --token)")
	fs.StringVar(&c.ReadTokenFile, "read-token-file", c.ReadTokenFile, "file holding the read token (instead of --read-token)")
	fs.StringVar(&c.JobsToken, "jobs-token", c.JobsToken, "bearer token of the HTTP API's jobs scope: reads and enqueueing jobs, what a service needs (needs --token or --tokens-file)")
	fs.StringVar(&c.JobsTokenFile, "jobs-token-file", c.JobsTokenFile, "file holding the jobs token (instead of --jobs-token)")
	fs.StringVar(&c.TokensFile, "tokens-file", c.TokensFile, "file of HTTP API tokens, one `scope token` per line (scope read, jobs or admin; # comments), re-read when it changes: add and revoke tokens without a restart")
	fs.Var(listValue{&c.HTTPAllowedHosts}, "http-allowed-hosts", "comma-separated host names the HTTP API answers to, besides IP addresses, localhost and the agent's own addresses (* for any): other Host headers answer 421, which defeats DNS rebinding")
	fs.BoolVar(&c.HTTPInsecure, "http-insecure", c.HTTPInsecure, "allow a non-loopback --http-addr without --token: anyone who reaches it can read job payloads, enqueue jobs and drain the node (logged loudly)")
	fs.BoolVar(&c.MetricsAuth, "metrics-auth", c.MetricsAuth, "require the read scope on /metrics (open otherwise; /healthz and /readyz are always open)")
	fs.StringVar(&c.HTTPTLSCert, "http-tls-cert", c.HTTPTLSCert, "PEM certificate (chain) for HTTPS on the API (with --http-tls-key; TLS 1.2+); re-read when it changes")
	fs.StringVar(&c.HTTPTLSKey, "http-tls-key", c.HTTPTLSKey, "PEM private key for HTTPS on the API; re-read when it changes")
	fs.IntVar(&c.HTTPMaxConnsPerClient, "http-max-conns-per-client", c.HTTPMaxConnsPerClient, "open HTTP connections one client IP may hold; more are closed at once (0: no cap)")
	fs.StringVar(&c.Witness, "witness", c.Witness, "URL the demo workload POSTs its ticks to (see: tenure witness -h)")
	fs.BoolVar(&c.Workload, "workload", c.Workload, "run the demo workload that ticks every owned shard")
	fs.DurationVar(&c.TickEvery, "tick", c.TickEvery, "demo workload tick period")
	fs.DurationVar(&c.TickSample, "tick-sample", c.TickSample, "demo workload: look at the acting shards this often (below --tick) and report to the witness the first and last sample of each acting stretch too, so it sees acting start and stop to within this (0: --tick)")
	fs.DurationVar(&c.DrainOnStop, "drain-timeout", c.DrainOnStop, "on SIGTERM/SIGINT, how long to wait for shards to hand over before leaving anyway")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: auto (text on a terminal, JSON otherwise), text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	fs.Var(&c.FencedShards, "fenced-shards", "comma-separated shards and ranges (0-63,128) to put under fenced takeover: each moves to a successor as soon as its owner is detected dead (--fenced-after), without waiting out its lease, so a stale owner may act at the same time and only the fencing token keeps its writes out (S4 waived; docs/guarantees.md). Only adds: undo with `tenure fenced --unset`. Needs cluster version 4")
}

// envName is the environment variable of a flag: TENURE_DATA_DIR (ff's
// naming with the TENURE prefix).
func envName(flagName string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// loadAgentConfig builds the config from defaults, the config file, the
// process environment and args (ff.Parse layers them); getenv supplies
// only the identity defaults (HOSTNAME, CLUSTER_NAME). Errors name the bad
// key and where it came from.
func loadAgentConfig(args []string, getenv func(string) string, stderr io.Writer) (agentConfig, error) {
	c := defaultAgentConfig(getenv)
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	agentFlags(fs, &c)
	fs.String("config", "", "config file: JSON, or key = value lines with flag names as keys")
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += fmt.Sprintf(" (env %s)", envName(f.Name))
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tenure agent [flags]")
		fmt.Fprintln(stderr, "\nRuns one node. Precedence: flags > TENURE_* env > config file > defaults.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	err := ff.Parse(fs, args,
		ff.WithEnvVarPrefix(envPrefix),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(configFileParser(fs)))
	if err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("agent: unexpected arguments %q", strings.Join(fs.Args(), " "))
	}
	if err := c.loadTokenFiles(); err != nil {
		return c, fmt.Errorf("agent config: %w", err)
	}
	return c, c.Validate()
}

// loadTokenFiles reads --token-file and --read-token-file into the tokens.
func (c *agentConfig) loadTokenFiles() error {
	for _, f := range []struct {
		name, file string
		tok        *string
	}{{"token", c.TokenFile, &c.Token}, {"jobs-token", c.JobsTokenFile, &c.JobsToken}, {"read-token", c.ReadTokenFile, &c.ReadToken}} {
		if f.file == "" {
			continue
		}
		if *f.tok != "" {
			return fmt.Errorf("both --%s and --%s-file are set: give one", f.name, f.name)
		}
		v, err := readSecretFile(f.name+"-file", f.file)
		if err != nil {
			return err
		}
		*f.tok = v
	}
	return nil
}

// listValue is a comma-separated list flag (tenure tls).
type listValue struct{ p *[]string }

func (v listValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v listValue) Set(s string) error {
	*v.p = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*v.p = append(*v.p, part)
		}
	}
	return nil
}

// secretFlags are the flags whose values errors never repeat.
var secretFlags = map[string]bool{"encrypt": true, "encrypt-key": true, "token": true, "read-token": true, "jobs-token": true}

func redact(flagName, v string) string {
	if secretFlags[flagName] {
		return "<redacted>"
	}
	return v
}

// maxConfigFile bounds the config file the agent reads.
const maxConfigFile = 1 << 20

// configFileParser is the config-file format for ff.Parse: a JSON object
// whose keys are flag names, or lines of `key = value` with # comments.
// Its errors name the file, the line and the key.
func configFileParser(fs *flag.FlagSet) ff.ConfigFileParser {
	return func(r io.Reader, setFlag func(name, value string) error) error {
		path := fs.Lookup("config").Value.String()
		b, err := io.ReadAll(io.LimitReader(r, maxConfigFile+1))
		if err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		if len(b) > maxConfigFile {
			return fmt.Errorf("config file %s: larger than %d bytes", path, maxConfigFile)
		}
		set := func(where, key, val string) error {
			if key == "config" {
				return fmt.Errorf("config file %s: %s: key \"config\" cannot be set from a config file", path, where)
			}
			if fs.Lookup(key) == nil {
				return fmt.Errorf("config file %s: %s: unknown key %q (keys are the agent's flag names, e.g. \"data-dir\")", path, where, key)
			}
			if err := setFlag(key, val); err != nil {
				return fmt.Errorf("config file %s: %s: key %q value %q: %v", path, where, key, redact(key, val), errors.Unwrap(err))
			}
			return nil
		}
		trimmed := bytes.TrimSpace(b)
		if len(trimmed) > 0 && trimmed[0] == '{' {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(trimmed, &obj); err != nil {
				return fmt.Errorf("config file %s: not valid JSON: %v", path, err)
			}
			keys := make([]string, 0, len(obj))
			for k := range obj {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				v, err := jsonValueString(obj[k])
				if err != nil {
					return fmt.Errorf("config file %s: key %q: %v", path, k, err)
				}
				if err := set("JSON", k, v); err != nil {
					return err
				}
			}
			return nil
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			k, v, ok := strings.Cut(text, "=")
			if !ok {
				return fmt.Errorf("config file %s: line %d: %q: want key = value", path, line, text)
			}
			v = strings.TrimSpace(v)
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			if err := set(fmt.Sprintf("line %d", line), strings.TrimSpace(k), v); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		return nil
	}
}

// jsonValueString turns a JSON config value into its flag string: strings
// as is, numbers and booleans as written, arrays of strings joined with
// commas (seeds), objects of strings as k=v pairs (tags).
func jsonValueString(raw json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("array element %d is not a string", i)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, ok := x[k].(string)
			if !ok {
				return "", fmt.Errorf("object value %q is not a string", k)
			}
			parts[i] = k + "=" + s
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("unsupported JSON value %s", raw)
}

// Validate reports every bad value, naming the setting.
func (c agentConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.NodeID == "" {
		bad("node-id is empty: set --node-id, TENURE_NODE_ID or HOSTNAME")
	}
	switch {
	case c.Diskless && c.Voter != node.VoterNever:
		bad("diskless with voter %q: a control-group voter keeps its Raft log, term and vote on disk; add --voter=never, or drop --diskless and set --data-dir", c.Voter)
	case c.DataDir == "" && !c.Diskless && c.Voter != node.VoterNever:
		bad("data-dir is empty: a node that may vote (voter %q) keeps its Raft log on disk; set --data-dir, or run a member with --diskless --voter=never", c.Voter)
	}
	if _, ok := c.Profile.Timing(); !ok {
		bad("profile %q: want fast, default or safe", c.Profile)
	}
	if c.BootstrapExpect < 1 || c.BootstrapExpect > 7 {
		bad("bootstrap-expect %d: want 1..7", c.BootstrapExpect)
	}
	if c.BootstrapExpect > 1 && len(c.Seeds) == 0 {
		bad("seeds empty with bootstrap-expect %d: a node that expects peers needs --seeds to find them", c.BootstrapExpect)
	}
	if c.Partitions < 1 || c.Partitions > 1<<16 {
		bad("partitions %d: want 1..65536", c.Partitions)
	}
	if c.MinHealth < 0 || c.MinHealth > 1 || c.MinHealth != c.MinHealth {
		bad("min-health %v: want 0..1", c.MinHealth)
	}
	for _, a := range []struct {
		name, v  string
		required bool
	}{
		{"gossip-addr", c.GossipAddr, true}, {"gossip-advertise", c.GossipAdvertise, false},
		{"raft-addr", c.RaftAddr, true}, {"raft-advertise", c.RaftAdvertise, false},
		{"http-addr", c.HTTPAddr, false},
	} {
		if err := checkHostPort(a.v, a.required); err != nil {
			bad("%s %q: %v", a.name, a.v, err)
		}
	}
	for i, s := range c.Seeds {
		if err := checkHostPort(s, true); err != nil {
			bad("seeds[%d] %q: %v", i, s, err)
		}
	}
	if c.Witness != "" {
		if u, err := url.Parse(c.Witness); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("witness %q: want an http:// or https:// URL", c.Witness)
		}
	}
	if c.TickEvery < time.Millisecond {
		bad("tick %s: want at least 1ms", c.TickEvery)
	}
	if c.TickSample != 0 && (c.TickSample < time.Millisecond || c.TickSample > c.TickEvery) {
		bad("tick-sample %s: want 0 or 1ms..--tick (%s)", c.TickSample, c.TickEvery)
	}
	if c.JobTimeout <= 0 {
		bad("job-timeout %s: want > 0", c.JobTimeout)
	}
	if c.DrainOnStop < 0 {
		bad("drain-timeout %s: want >= 0", c.DrainOnStop)
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		bad("log-format %q: want auto, text or json", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log-level %q: %v", c.LogLevel, err)
	}
	for _, t := range []struct{ name, v string }{{"token", c.Token}, {"jobs-token", c.JobsToken}, {"read-token", c.ReadToken}} {
		if t.v == "" {
			continue
		}
		if err := checkToken(t.v); err != nil {
			bad("%s: %v", t.name, err)
		}
	}
	if (c.ReadToken != "" || c.JobsToken != "") && c.Token == "" && c.TokensFile == "" {
		bad("read-token or jobs-token without token: set --token (the admin scope) or --tokens-file too")
	}
	if c.JobsToken != "" && (c.JobsToken == c.Token || c.JobsToken == c.ReadToken) {
		bad("jobs-token equals another token: each scope needs a token of its own")
	}
	if c.ReadToken != "" && c.ReadToken == c.Token {
		bad("read-token equals token: the read scope needs a token of its own")
	}
	if (c.HTTPTLSCert == "") != (c.HTTPTLSKey == "") {
		bad("http-tls-cert and http-tls-key: give both or neither")
	}
	if c.HTTPMaxConnsPerClient < 0 {
		bad("http-max-conns-per-client %d: want >= 0 (0: no cap)", c.HTTPMaxConnsPerClient)
	}
	if c.MaxPendingJobs < 0 {
		bad("max-pending-jobs %d: want >= 0 (0: no cap)", c.MaxPendingJobs)
	}
	for _, r := range c.FencedShards {
		if int64(r.Last) >= int64(c.Partitions) {
			bad("fenced-shards %s: shard %d does not exist (partitions %d: shards 0..%d)", (&shardRangesFlag{r}).String(), r.Last, c.Partitions, c.Partitions-1)
		}
	}
	if c.FencedAfter < 0 {
		bad("fenced-after %s: want >= 0 (0: 3 heartbeat periods)", c.FencedAfter)
	}
	if _, err := cluster.ParseVoterPreference(string(c.Voter)); err != nil {
		bad("voter %q: want auto, always or never", c.Voter)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("agent config: %w", errors.Join(errs...))
}

func checkHostPort(v string, required bool) error {
	if v == "" {
		if required {
			return errors.New("empty: want host:port")
		}
		return nil
	}
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want host:port")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q: want 0..65535", port)
	}
	return nil
}

// advertiseAddr returns the address peers should use for a bind address:
// adv if set, else bind unless its host is a wildcard, in which case this
// host's first private (else any non-loopback) IPv4 address.
func advertiseAddr(bind, adv string) (string, error) {
	if adv != "" {
		return adv, nil
	}
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return bind, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("finding an address to advertise for %s: %w", bind, err)
	}
	var private, public net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.IsPrivate() && private == nil {
			private = ipn.IP
		} else if public == nil {
			public = ipn.IP
		}
	}
	switch {
	case private != nil:
		return net.JoinHostPort(private.String(), port), nil
	case public != nil:
		return net.JoinHostPort(public.String(), port), nil
	}
	return "", fmt.Errorf("binding %s but no non-loopback IPv4 address to advertise: set the advertise address", bind)
}
