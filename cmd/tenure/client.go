package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Operator commands: they talk to any agent's HTTP API.

// Client defaults.
const (
	// defaultHTTPPort is the agent's default HTTP API port.
	defaultHTTPPort = 7948
	// defaultClientTimeout bounds one request of an operator command.
	defaultClientTimeout = 10 * time.Second
)

var defaultAddr = "127.0.0.1:" + strconv.Itoa(defaultHTTPPort)

func init() {
	register("status", "show an agent's node, control group, health and members", runStatus)
	register("shards", "list shards with owner, epoch, state and lease", runShards)
	register("members", "list cluster members with health", runMembers)
	register("elections", "list elections and their leaders", runElections)
	register("moves", "list recent ownership moves and why they happened", runMoves)
	register("jobs", "enqueue, get and list jobs (tenure jobs -h)", runJobs)
	register("drain", "move every shard off an agent (--undo to make it eligible again)", runDrain)
}

// clientFlags are the flags every operator command takes.
type clientFlags struct {
	addr      string
	token     string
	tokenFile string
	ca        string
	json      bool
	timeout   time.Duration
}

func (m *Main) clientFlagSet(name, usage string) (*flag.FlagSet, *clientFlags) {
	cf := &clientFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	addr := m.getenv("TENURE_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&cf.addr, "addr", addr, "agent HTTP address, host:port or URL (env TENURE_ADDR)")
	fs.StringVar(&cf.token, "token", m.getenv("TENURE_TOKEN"), "bearer token sent with every request: the agent's read token for reads, its write token for changes (env TENURE_TOKEN)")
	fs.StringVar(&cf.tokenFile, "token-file", m.getenv("TENURE_TOKEN_FILE"), "file holding the bearer token, instead of --token (env TENURE_TOKEN_FILE)")
	ca := m.getenv("TENURE_HTTP_CA")
	fs.StringVar(&cf.ca, "ca", ca, "PEM CA bundle that verifies the agent's HTTPS certificate; implies https:// for a bare host:port (env TENURE_HTTP_CA)")
	fs.StringVar(&cf.ca, "tls-ca", ca, "same as --ca")
	fs.BoolVar(&cf.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&cf.timeout, "timeout", defaultClientTimeout, "request timeout")
	fs.Usage = func() {
		fmt.Fprintf(m.Stderr, "usage: tenure %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs, cf
}

func (cf *clientFlags) client() (*client.Client, error) {
	token := cf.token
	if cf.tokenFile != "" { // the file wins over --token / TENURE_TOKEN
		var err error
		if token, err = readSecretFile("--token-file", cf.tokenFile); err != nil {
			return nil, err
		}
	}
	if token != "" {
		if err := checkToken(token); err != nil {
			return nil, fmt.Errorf("token: %v", err)
		}
	}
	o := client.Options{Token: token, Timeout: cf.timeout}
	if cf.ca != "" {
		if strings.HasPrefix(cf.addr, "http://") {
			return nil, fmt.Errorf("--ca is set but --addr %q is http://: use https://", cf.addr)
		}
		pem, err := os.ReadFile(cf.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca %s: no PEM certificate in it", cf.ca)
		}
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	c, err := client.New(cf.addr, o)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: want host:port, http://host:port or https://host:port", cf.addr)
	}
	return c, nil
}

// explain turns a client error into what an operator can act on.
func explain(c *client.Client, err error) error {
	var ue *client.UnreachableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return fmt.Errorf("no agent answers at %s (%v): start one with `tenure agent` or `tenure demo`, or point --addr / TENURE_ADDR at a running agent", c.Addr(), unwrapAll(err))
	case errors.Is(err, client.ErrNotTenure):
		return fmt.Errorf("%s is not a tenure agent: %w", c.Addr(), err)
	}
	return err
}

func unwrapAll(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// fetch runs one call of a command and prints either JSON or the table.
func fetch[T any](ctx context.Context, m *Main, cf *clientFlags, call func(*client.Client, context.Context) (T, error), table func(io.Writer, any)) error {
	c, err := cf.client()
	if err != nil {
		return err
	}
	v, err := call(c, ctx)
	if err != nil {
		return explain(c, err)
	}
	return m.print(cf, v, table)
}

func (m *Main) print(cf *clientFlags, v any, table func(io.Writer, any)) error {
	if cf.json {
		enc := json.NewEncoder(m.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	table(tw, v)
	return tw.Flush()
}

// noArgs parses flags and rejects positional arguments.
func noArgs(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), strings.Join(fs.Args(), " "))
	}
	return nil
}

func runStatus(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("status", "status [--addr host:port] [--json]")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	return fetch(ctx, m, cf, (*client.Client).Status, func(w io.Writer, v any) {
		st := v.(apitypes.Status)
		fmt.Fprintf(w, "node\t%s (group %s, incarnation %d, profile %s, version %s)\n", st.Node, st.Group, st.Incarnation, st.Profile, st.Version)
		fmt.Fprintf(w, "control leader\t%s\n", orDash(st.ControlLeader))
		fmt.Fprintf(w, "voters\t%s\n", orDash(strings.Join(st.Voters, ", ")))
		fmt.Fprintf(w, "health\t%s\n", healthLine(st.Health))
		fmt.Fprintf(w, "acting on\t%d of %d shards\n", st.Owned, st.Partitions)
		fmt.Fprintf(w, "applied index\t%d\n", st.AppliedIndex)
		if line := streamLine(st.Stream); line != "" {
			fmt.Fprintf(w, "stream\t%s\n", line)
		}
		fmt.Fprintln(w)
		memberTable(w, st.Members)
	})
}

// streamLine describes a node's part in the committed-state stream: a
// member's lag, a voter's subscribers; "" when it has none.
func streamLine(s *apitypes.Stream) string {
	switch {
	case s == nil:
		return ""
	case s.Following:
		return fmt.Sprintf("following %s, %d entries / %d ms behind (%d reconnects, %d snapshots, %d bytes received)",
			orDash(s.Server), s.LagEntries, s.LagMS, s.Reconnects, s.Snapshots, s.BytesReceived)
	case s.Subscribers > 0 || s.BytesSent > 0:
		return fmt.Sprintf("serving %d subscribers (%d bytes sent)", s.Subscribers, s.BytesSent)
	}
	return ""
}

func healthLine(h apitypes.Health) string {
	if len(h.Reasons) == 0 {
		return h.Status
	}
	return h.Status + ": " + strings.Join(h.Reasons, "; ")
}

func runShards(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("shards", "shards [--owner id] [--state owned|unowned|revoking] [--addr host:port] [--json]")
	owner := fs.String("owner", "", "only shards owned by this node")
	state := fs.String("state", "", "only shards in this state (owned, unowned, revoking)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *state != "" && !slices.Contains([]string{"unowned", "owned", "revoking"}, *state) {
		return fmt.Errorf("shards: --state %q: want unowned, owned or revoking", *state)
	}
	shards := func(c *client.Client, ctx context.Context) ([]apitypes.Shard, error) {
		return c.Shards(ctx, client.ShardFilter{Owner: *owner, State: *state})
	}
	return fetch(ctx, m, cf, shards, func(w io.Writer, v any) {
		fmt.Fprintln(w, "SHARD\tOWNER\tEPOCH\tSTATE\tVALID\tACTING HERE\tLEASE\tREASON")
		for _, s := range v.([]apitypes.Shard) {
			lease := "-"
			if s.Acting {
				lease = (time.Duration(s.LeaseRemainingMS) * time.Millisecond).String()
			}
			state := s.State
			if s.Target != "" {
				state += " → " + s.Target
			}
			if s.Fenced {
				state += " (fenced)" // under fenced takeover: S4 waived
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%t\t%t\t%s\t%s\n", s.Shard, orDash(s.Owner), s.Epoch, state, s.Valid, s.Acting, lease, orDash(s.Reason))
		}
	})
}

func runMembers(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("members", "members [--addr host:port] [--json]")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	return fetch(ctx, m, cf, (*client.Client).Members, func(w io.Writer, v any) { memberTable(w, v.([]apitypes.Member)) })
}

func memberTable(w io.Writer, ms []apitypes.Member) {
	fmt.Fprintln(w, "ID\tSTATE\tHEALTH\tLIVE\tVOTER\tLEADER\tDRAINING\tEXCLUDED\tWEIGHT\tZONE\tGOSSIP\tHTTP")
	for _, mb := range ms {
		state := mb.State
		if mb.Unproven {
			state += "/unproven" // gossip names it, but it has not proven its id at its Raft address
		}
		fmt.Fprintf(w, "%s\t%s\t%.2f\t%t\t%t\t%t\t%t\t%t\t%d\t%s\t%s\t%s\n", mb.ID, state, mb.Health, mb.Live, mb.Voter, mb.Leader, mb.Draining,
			mb.Excluded, max(mb.Weight, 1), orDash(mb.Zone), orDash(mb.Addr), orDash(mb.HTTPAddr))
	}
}

func runElections(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("elections", "elections [--addr host:port] [--json]")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	return fetch(ctx, m, cf, (*client.Client).Elections, func(w io.Writer, v any) {
		es := v.([]apitypes.Election)
		if len(es) == 0 {
			fmt.Fprintln(w, "no elections")
			return
		}
		fmt.Fprintln(w, "NAME\tSHARD\tLEADER\tEPOCH\tSTATE")
		for _, e := range es {
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\n", e.Name, e.Shard, orDash(e.Leader), e.Epoch, e.State)
		}
	})
}

func runMoves(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("moves", "moves [--addr host:port] [--json]")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	moves := func(c *client.Client, ctx context.Context) ([]apitypes.Move, error) { return c.Moves(ctx, 0) }
	return fetch(ctx, m, cf, moves, func(w io.Writer, v any) {
		fmt.Fprintln(w, "AT\tSHARD\tEPOCH\tFROM\tTO\tREASON\tCAUSE")
		for _, mv := range v.([]apitypes.Move) {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", mv.At.Format("15:04:05.000"), mv.Shard, mv.Epoch, orDash(mv.From), orDash(mv.To), orDash(mv.Reason), orDash(mv.Cause))
		}
	})
}

func runJobs(ctx context.Context, m *Main, args []string) error {
	usage := func() {
		fmt.Fprintln(m.Stderr, "usage: tenure jobs <list|get|enqueue> [flags]")
		fmt.Fprintln(m.Stderr, "  list    [--shard n] [--state pending|started|completed|dead] [--limit n] [--after id] [--consistent]")
		fmt.Fprintln(m.Stderr, "  get     <id> [--consistent]")
		fmt.Fprintln(m.Stderr, "  enqueue --type t --key k [--shard-key s] [--payload json] [--max-attempts n] [--request-id id]")
	}
	if len(args) == 0 {
		usage()
		return errors.New("jobs: no subcommand given")
	}
	switch args[0] {
	case "list":
		fs, cf := m.clientFlagSet("jobs list", "jobs list [--shard n] [--state s] [--limit n] [--addr host:port] [--json]")
		shard := fs.Int("shard", -1, "only jobs of this shard")
		state := fs.String("state", "", "only jobs in this state")
		limit := fs.Int("limit", 100, "at most this many jobs (one page)")
		after := fs.String("after", "", "list jobs after this id (the \"next\" of the previous page)")
		consistent := fs.Bool("consistent", false, "a linearizable page: the server first waits for a read barrier (cluster version 5)")
		if err := noArgs(fs, args[1:]); err != nil {
			return err
		}
		if *state != "" && !slices.Contains(apitypes.JobStates, *state) {
			return fmt.Errorf("jobs list: --state %q: want one of %s", *state, strings.Join(apitypes.JobStates, ", "))
		}
		f := client.JobFilter{State: *state, Limit: *limit, After: *after, Consistent: *consistent}
		if *shard >= 0 {
			s := uint32(*shard)
			f.Shard = &s
		}
		jobs := func(c *client.Client, ctx context.Context) (apitypes.JobList, error) { return c.Jobs(ctx, f) }
		return fetch(ctx, m, cf, jobs, func(w io.Writer, v any) {
			js := v.(apitypes.JobList)
			counts := make([]string, 0, len(apitypes.JobStates))
			for _, s := range apitypes.JobStates {
				counts = append(counts, fmt.Sprintf("%s %d", s, js.Counts[s]))
			}
			fmt.Fprintf(w, "%s\n\n", strings.Join(counts, ", "))
			jobTable(w, js.Jobs)
			if js.Next != "" {
				fmt.Fprintf(w, "\nmore: tenure jobs list --after %s\n", js.Next)
			}
		})
	case "get":
		fs, cf := m.clientFlagSet("jobs get", "jobs get <id> [--consistent] [--addr host:port] [--json]")
		consistent := fs.Bool("consistent", false, "a linearizable read: the server first waits for a read barrier (cluster version 5)")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return errors.New("jobs get: want exactly one job id")
		}
		var opts []client.ReadOption
		if *consistent {
			opts = append(opts, client.Consistent())
		}
		job := func(c *client.Client, ctx context.Context) (apitypes.Job, error) {
			return c.Job(ctx, fs.Arg(0), opts...)
		}
		return fetch(ctx, m, cf, job, func(w io.Writer, v any) {
			jobTable(w, []apitypes.Job{v.(apitypes.Job)})
		})
	case "enqueue":
		fs, cf := m.clientFlagSet("jobs enqueue", "jobs enqueue --type t --key k [--shard-key s] [--payload json] [--max-attempts n] [--request-id id]")
		typ := fs.String("type", "", "job type (required)")
		key := fs.String("key", "", "idempotency key (unique per shard); also picks the shard when --shard-key is empty")
		shardKey := fs.String("shard-key", "", "key whose shard the job goes to (e.g. a tenant id)")
		payload := fs.String("payload", "", "JSON payload")
		maxAttempts := fs.Uint("max-attempts", 0, "attempts before the job is dead-lettered (0: cluster default)")
		requestID := fs.String("request-id", "", "Idempotency-Key of this request (default: a random one, printed): run the command again with it to retry the same request — it answers the first try's result, and the key with another body fails (422)")
		if err := noArgs(fs, args[1:]); err != nil {
			return err
		}
		if *requestID != "" {
			if _, err := httpapi.ParseIdempotencyKey(*requestID); err != nil {
				return fmt.Errorf("jobs enqueue: --request-id: %w", err)
			}
		} else {
			*requestID = client.NewIdempotencyKey()
		}
		req := apitypes.JobRequest{Key: *key, ShardKey: *shardKey, Type: *typ, MaxAttempts: uint32(*maxAttempts)}
		if *typ == "" {
			return errors.New("jobs enqueue: --type is required")
		}
		if *key == "" && *shardKey == "" {
			return errors.New("jobs enqueue: give --key or --shard-key")
		}
		if *payload != "" {
			if !json.Valid([]byte(*payload)) {
				return fmt.Errorf("jobs enqueue: --payload %q is not valid JSON", *payload)
			}
			req.Payload = json.RawMessage(*payload)
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		j, created, err := c.EnqueueJob(ctx, req, client.WithIdempotencyKey(*requestID))
		if err != nil {
			if errors.Is(err, client.ErrKeyReused) {
				return fmt.Errorf("jobs enqueue: request id %s was used for another request: %w", *requestID, err)
			}
			return fmt.Errorf("%w (retry with --request-id %s)", explain(c, err), *requestID)
		}
		if cf.json {
			return m.print(cf, j, nil)
		}
		verb := "enqueued"
		if !created {
			verb = "already enqueued"
		}
		fmt.Fprintf(m.Stdout, "%s job %s on shard %d (%s), request id %s\n", verb, j.ID, j.Shard, j.State, *requestID)
		return nil
	case "-h", "--help", "help":
		usage()
		return nil
	}
	usage()
	return fmt.Errorf("jobs: unknown subcommand %q", args[0])
}

func jobTable(w io.Writer, js []apitypes.Job) {
	fmt.Fprintln(w, "ID\tSHARD\tKEY\tTYPE\tSTATE\tATTEMPT\tOWNER\tEPOCH\tERROR")
	for _, j := range js {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d/%d\t%s\t%d\t%s\n", j.ID, j.Shard, orDash(j.Key), j.Type, j.State, j.Attempt, j.MaxAttempts, orDash(j.Owner), j.Epoch, orDash(j.LastError))
	}
}

func runDrain(ctx context.Context, m *Main, args []string) error {
	fs, cf := m.clientFlagSet("drain", "drain [--node id] [--undo] [--wait 60s] [--addr host:port] [--json]")
	undo := fs.Bool("undo", false, "make a drained agent eligible for shards again")
	wait := fs.Duration("wait", 60*time.Second, "how long the agent waits for its shards to move before answering")
	nodeID := fs.String("node", "", "drain this node, found through --addr's member list (default: the agent at --addr)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if !*undo && cf.timeout < *wait+5*time.Second {
		cf.timeout = *wait + 5*time.Second
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *nodeID != "" {
		if c, err = memberClient(ctx, c, cf, *nodeID); err != nil {
			return err
		}
	}
	var d apitypes.Drain
	if *undo {
		d, err = c.Undrain(ctx)
	} else {
		d, err = c.Drain(ctx, *wait)
	}
	if err != nil {
		return explain(c, err)
	}
	if *nodeID != "" && d.Node != *nodeID {
		return fmt.Errorf("drain --node %s: the agent at %s is %s, not %s", *nodeID, c.Addr(), d.Node, *nodeID)
	}
	if cf.json {
		return m.print(cf, d, nil)
	}
	switch {
	case *undo:
		fmt.Fprintf(m.Stdout, "%s is eligible for shards again\n", d.Node)
	case d.Done && d.Owned == 0:
		fmt.Fprintf(m.Stdout, "%s drained: it acts on no shard\n", d.Node)
	case !d.OthersEligible || d.Done:
		// d.Done with shards left: an agent from before others_eligible
		// that returned because nobody could take them.
		return fmt.Errorf("%s cannot hand over: no other node is eligible to take its %d shards, so they stay on it; it is marked draining and hands them over once another node is eligible (start or undrain one), or run `tenure drain --undo`", d.Node, d.Owned)
	default:
		fmt.Fprintf(m.Stdout, "%s is draining: still acting on %d shards after %s\n", d.Node, d.Owned, *wait)
	}
	return nil
}

// memberClient is a client of member id's API, found in the member list of
// the agent c calls: its gossiped HTTP address, with c's scheme, token and
// CA.
func memberClient(ctx context.Context, c *client.Client, cf *clientFlags, id string) (*client.Client, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing members to find %s: %w", id, explain(c, err))
	}
	ids := make([]string, 0, len(members))
	for _, mb := range members {
		ids = append(ids, mb.ID)
		if mb.ID != id {
			continue
		}
		if mb.HTTPAddr == "" {
			return nil, fmt.Errorf("%s gossips no HTTP address (its agent runs without --http-addr): use --addr with its API address", id)
		}
		mcf := *cf
		mcf.addr = mb.HTTPAddr
		if !strings.Contains(mb.HTTPAddr, "://") && strings.HasPrefix(c.Addr(), "https://") {
			mcf.addr = "https://" + mb.HTTPAddr
		}
		return mcf.client()
	}
	return nil, fmt.Errorf("%s is not a member known to %s (members: %s)", id, c.Addr(), strings.Join(ids, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
