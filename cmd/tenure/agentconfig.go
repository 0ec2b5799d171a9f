package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Agent defaults.
const (
	defaultGossipPort  = 7946
	defaultRaftPort    = 7947
	defaultPartitions  = 271
	defaultBootstrap   = 3
	defaultDrainOnStop = 30 * time.Second
	defaultDataDir     = "tenure-data"
	defaultProfile     = "default"
	defaultGroup       = "default"
	defaultMinHealth   = 0.5
	defaultJobTimeout  = time.Minute
	envPrefix          = "TENURE_"
	envIdentityNode    = "HOSTNAME"
	envIdentityGroup   = "CLUSTER_NAME"
)

// agentConfig is everything `tenure agent` is configured with. Values come
// from, in increasing precedence: defaults, the config file (--config or
// TENURE_CONFIG), the environment (TENURE_<FLAG>, plus HOSTNAME and
// CLUSTER_NAME for the identity) and the command line.
type agentConfig struct {
	NodeID          string
	Group           string
	DataDir         string
	Seeds           []string
	BootstrapExpect int
	GossipAddr      string
	GossipAdvertise string
	RaftAddr        string
	RaftAdvertise   string
	HTTPAddr        string
	Profile         string
	Partitions      int
	MinHealth       float64
	EncryptKey      []byte // decoded from base64
	// HTTP API tokens (write scope, read scope) or the files holding them.
	Token         string
	ReadToken     string
	TokenFile     string
	ReadTokenFile string
	// HTTPInsecure allows a non-loopback HTTP API without a token.
	HTTPInsecure bool
	// MetricsAuth puts /metrics under the read scope.
	MetricsAuth bool
	// HTTPS on the API: certificate and key files, re-read on change.
	HTTPTLSCert string
	HTTPTLSKey  string
	// HTTPMaxConnsPerClient caps open HTTP connections per client IP (0: none).
	HTTPMaxConnsPerClient int
	// MaxPendingJobs caps the pending jobs of one shard (0: none).
	MaxPendingJobs int
	// ManualFinalize: the cluster version is raised only by `tenure
	// upgrade finalize` (node.Config.ManualFinalize).
	ManualFinalize bool
	// Voter is the node's place in the control group: auto, always or
	// never (node.Config.Voter).
	Voter string
	// Diskless runs the node as a disk-less member (node.Config.Diskless):
	// no data dir; needs Voter never.
	Diskless bool
	// VotersOwnShards false: while a voter, this node owns no shards
	// (node.Config.VoterOwnsNoShards).
	VotersOwnShards bool
	Witness         string
	Workload        bool
	TickEvery       time.Duration
	DrainOnStop     time.Duration
	JobTimeout      time.Duration
	Tags            map[string]string
	LogFormat       string // auto, text, json
	LogLevel        string // debug, info, warn, error
	// Mutual TLS on the Raft/RPC port (node.Config.TLS*).
	TLSCA   string
	TLSCert string
	TLSKey  string
	// Insecure allows a non-loopback Raft port without TLS.
	Insecure bool
}

// defaultAgentConfig returns the defaults before file, env and flags.
func defaultAgentConfig() agentConfig {
	return agentConfig{
		Group:           defaultGroup,
		DataDir:         defaultDataDir,
		BootstrapExpect: defaultBootstrap,
		GossipAddr:      "0.0.0.0:" + strconv.Itoa(defaultGossipPort),
		RaftAddr:        "0.0.0.0:" + strconv.Itoa(defaultRaftPort),
		HTTPAddr:        "0.0.0.0:" + strconv.Itoa(defaultHTTPPort),
		Profile:         defaultProfile,
		Partitions:      defaultPartitions,
		MinHealth:       defaultMinHealth,
		Workload:        true,
		Voter:           "auto",
		VotersOwnShards: true,
		TickEvery:       defaultTickEvery,
		DrainOnStop:     defaultDrainOnStop,
		JobTimeout:      defaultJobTimeout,
		LogFormat:       "auto",
		LogLevel:        "info",

		HTTPMaxConnsPerClient: defaultMaxConnsPerClient,
		MaxPendingJobs:        defaultMaxPendingJobs,
	}
}

// listValue is a comma-separated list flag.
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

// tagsValue is a comma-separated k=v list flag.
type tagsValue struct{ p *map[string]string }

func (v tagsValue) String() string {
	if v.p == nil {
		return ""
	}
	keys := make([]string, 0, len(*v.p))
	for k := range *v.p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + (*v.p)[k]
	}
	return strings.Join(parts, ",")
}

func (v tagsValue) Set(s string) error {
	m := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("tag %q: want key=value", part)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	*v.p = m
	return nil
}

// keyValue is a base64-encoded key flag.
type keyValue struct{ p *[]byte }

func (v keyValue) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	return "<redacted>"
}

func (v keyValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*v.p = nil
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return errors.New("not valid base64 (generate one with `head -c 32 /dev/urandom | base64`)")
	}
	if n := len(b); n != 16 && n != 24 && n != 32 {
		return fmt.Errorf("decodes to %d bytes, want 16, 24 or 32", n)
	}
	*v.p = b
	return nil
}

// agentFlags declares every agent setting on fs, bound to c.
func agentFlags(fs *flag.FlagSet, c *agentConfig) {
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "stable node id (default $HOSTNAME)")
	fs.StringVar(&c.Group, "group", c.Group, "group the node belongs to (default $CLUSTER_NAME, else \"default\")")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the node's identity, Raft log and snapshots (none with --diskless)")
	fs.BoolVar(&c.Diskless, "diskless", c.Diskless, "run as a disk-less member: no data dir, the ledger replica rebuilt from the voters and a new incarnation from the control group at every start; needs --voter=never and a cluster at version 3 (docs/operations.md)")
	fs.Var(listValue{&c.Seeds}, "seeds", "comma-separated gossip addresses (host:port) of nodes to join")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", c.BootstrapExpect, "control-group voters that must see each other before the cluster forms (1 = single node; 3 or 5 in production)")
	fs.StringVar(&c.GossipAddr, "gossip-addr", c.GossipAddr, "host:port the gossip transport binds")
	fs.StringVar(&c.GossipAdvertise, "gossip-advertise", c.GossipAdvertise, "host:port other nodes reach gossip at (default: the bind address, or this host's private IP when binding a wildcard)")
	fs.StringVar(&c.RaftAddr, "raft-addr", c.RaftAddr, "host:port the Raft transport binds")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", c.RaftAdvertise, "host:port other nodes reach Raft at (default like --gossip-advertise)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "host:port the HTTP API, metrics and dashboard listen on (empty: none)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "lease timing profile: fast, default or safe")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "number of shards (the same on every node, for the cluster's life)")
	fs.Float64Var(&c.MinHealth, "min-health", c.MinHealth, "health score (0..1) below which the node gives its shards up")
	fs.Var(keyValue{&c.EncryptKey}, "encrypt", "base64 gossip encryption key of 16, 24 or 32 bytes (same on every node)")
	fs.StringVar(&c.Token, "token", c.Token, "bearer token of the HTTP API's write scope (every endpoint); with it set every /v1 endpoint needs a token. Prefer --token-file: argv is visible to other users")
	fs.StringVar(&c.ReadToken, "read-token", c.ReadToken, "bearer token of the HTTP API's read scope: GETs, job payloads and results included (needs --token)")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file holding the write token (instead of --token)")
	fs.StringVar(&c.ReadTokenFile, "read-token-file", c.ReadTokenFile, "file holding the read token (instead of --read-token)")
	fs.BoolVar(&c.HTTPInsecure, "http-insecure", c.HTTPInsecure, "allow a non-loopback --http-addr without --token: anyone who reaches it can read job payloads, enqueue jobs and drain the node (logged loudly)")
	fs.BoolVar(&c.MetricsAuth, "metrics-auth", c.MetricsAuth, "require the read scope on /metrics (open otherwise; /healthz and /readyz are always open)")
	fs.StringVar(&c.HTTPTLSCert, "http-tls-cert", c.HTTPTLSCert, "PEM certificate (chain) for HTTPS on the API (with --http-tls-key; TLS 1.2+); re-read when it changes")
	fs.StringVar(&c.HTTPTLSKey, "http-tls-key", c.HTTPTLSKey, "PEM private key for HTTPS on the API; re-read when it changes")
	fs.IntVar(&c.HTTPMaxConnsPerClient, "http-max-conns-per-client", c.HTTPMaxConnsPerClient, "open HTTP connections one client IP may hold; more are closed at once (0: no cap)")
	fs.BoolVar(&c.ManualFinalize, "manual-finalize", c.ManualFinalize, "after a rolling upgrade, keep the cluster version until `tenure upgrade finalize` (a window to go back to the previous binary); by default the leader finalizes once every live node runs the new binary")
	fs.StringVar(&c.Voter, "voter", c.Voter, "this node's place in the control group: auto (promoted when voters are needed, lowest id first), always (bootstrap voter and promoted first) or never (never votes: for members beside a fixed voter set)")
	fs.BoolVar(&c.VotersOwnShards, "voters-own-shards", c.VotersOwnShards, "false: while this node is a control-group voter it owns no shards, so a voter's death is never also an owner failure (set it on every node that may vote; costs the voters' capacity)")
	fs.IntVar(&c.MaxPendingJobs, "max-pending-jobs", c.MaxPendingJobs, "pending jobs one shard may hold: enqueues beyond it answer 429 (checked by this node before proposing, so advisory under concurrent enqueues; 0: no cap)")
	fs.StringVar(&c.Witness, "witness", c.Witness, "URL the demo workload POSTs its ticks to (see: tenure witness -h)")
	fs.BoolVar(&c.Workload, "workload", c.Workload, "run the demo workload that ticks every owned shard")
	fs.DurationVar(&c.TickEvery, "tick", c.TickEvery, "demo workload tick period")
	fs.DurationVar(&c.DrainOnStop, "drain-timeout", c.DrainOnStop, "on SIGTERM/SIGINT, how long to wait for shards to hand over before leaving anyway")
	fs.DurationVar(&c.JobTimeout, "job-timeout", c.JobTimeout, "how long one job attempt may run before the shard's owner may retry it")
	fs.Var(tagsValue{&c.Tags}, "tags", "comma-separated key=value labels gossiped with the node")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: auto (text on a terminal, JSON otherwise), text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "PEM file of the cluster's CA (bundle): with --tls-cert and --tls-key the Raft/RPC port speaks only mutual TLS (`tenure tls init`); required off loopback unless --insecure")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM file of this node's certificate (its node id in the certificate must equal --node-id); re-read when it changes")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM file of this node's private key; re-read when it changes")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow a non-loopback Raft/RPC port without TLS: anyone who reaches it can commit any command (logged loudly)")
}

// envName is the environment variable of a flag: TENURE_DATA_DIR.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// loadAgentConfig builds the config from defaults, the config file, the
// environment and args. Errors name the bad key and where it came from.
func loadAgentConfig(args []string, getenv func(string) string, stderr io.Writer) (agentConfig, error) {
	c := defaultAgentConfig()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	agentFlags(fs, &c)
	configPath := fs.String("config", getenv(envPrefix+"CONFIG"), "config file: JSON, or key = value lines with flag names as keys (env TENURE_CONFIG)")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" {
			f.Usage += fmt.Sprintf(" (env %s)", envName(f.Name))
		}
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tenure agent [flags]")
		fmt.Fprintln(stderr, "\nRuns one node. Precedence: flags > TENURE_* env > config file > defaults.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	// Find --config on the command line first: the file goes under env
	// and flags, so it is applied before them.
	file := *configPath
scan:
	for i, a := range args {
		switch {
		case a == "--":
			break scan
		case (a == "--config" || a == "-config") && i+1 < len(args):
			file = args[i+1]
		case strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "-config="):
			file = a[strings.Index(a, "=")+1:]
		}
	}
	if file != "" {
		if err := applyConfigFile(fs, file); err != nil {
			return c, err
		}
	}
	// Identity from the platform (Kubernetes StatefulSet: HOSTNAME is
	// stable), then TENURE_* which wins over it.
	if v := strings.TrimSpace(getenv(envIdentityNode)); v != "" {
		c.NodeID = v
	}
	if v := strings.TrimSpace(getenv(envIdentityGroup)); v != "" {
		c.Group = v
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || envErr != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := lookup(getenv, name); ok {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("environment %s=%q: %v", name, redact(f.Name, v), err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := parseFlags(fs, args); err != nil {
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
	}{{"token", c.TokenFile, &c.Token}, {"read-token", c.ReadTokenFile, &c.ReadToken}} {
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

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func redact(flagName, v string) string {
	if flagName == "encrypt" || flagName == "token" || flagName == "read-token" {
		return "<redacted>"
	}
	return v
}

// applyConfigFile sets every key of the file on fs. The file is JSON (an
// object whose keys are flag names) or lines of `key = value` with #
// comments.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	set := func(where, key, val string) error {
		if key == "config" {
			return fmt.Errorf("config file %s: %s: key \"config\" cannot be set from a config file", path, where)
		}
		if fs.Lookup(key) == nil {
			return fmt.Errorf("config file %s: %s: unknown key %q (keys are the agent's flag names, e.g. \"data-dir\")", path, where, key)
		}
		if err := fs.Set(key, val); err != nil {
			return fmt.Errorf("config file %s: %s: key %q value %q: %v", path, where, key, redact(key, val), err)
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
	return sc.Err()
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
	case c.Diskless && c.Voter != "never":
		bad("diskless with voter %q: a control-group voter keeps its Raft log, term and vote on disk; add --voter=never, or drop --diskless and set --data-dir", c.Voter)
	case c.DataDir == "" && !c.Diskless && c.Voter != "never":
		bad("data-dir is empty: a node that may vote (voter %q) keeps its Raft log on disk; set --data-dir, or run a member with --diskless --voter=never", c.Voter)
	}
	switch c.Profile {
	case "fast", "default", "safe":
	default:
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
	for _, t := range []struct{ name, v string }{{"token", c.Token}, {"read-token", c.ReadToken}} {
		if t.v == "" {
			continue
		}
		if err := checkToken(t.v); err != nil {
			bad("%s: %v", t.name, err)
		}
	}
	if c.ReadToken != "" && c.Token == "" {
		bad("read-token without token: set --token (the write scope) too")
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
	switch c.Voter {
	case "auto", "always", "never":
	default:
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
