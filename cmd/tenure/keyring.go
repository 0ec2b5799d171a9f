package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/node"
)

// The gossip keyring, over the API and the CLI. Rotation is three rounds,
// each done on every node before the next (docs/security.md): install the
// new key, use it, remove the old one. `tenure keyring` runs one round on
// every member the agent at --addr knows (or only that agent with --one).

// keyringNode is the part of an agent's node that manages its gossip
// keyring (optional: the API answers 501 without it).
type keyringNode interface {
	GossipKeys() ([]node.GossipKey, error)
	GossipKeyOp(op string, key []byte) error
}

// keyringJSON is GET /v1/keyring and the answer to a keyring operation.
type keyringJSON struct {
	Node string           `json:"node"`
	Keys []node.GossipKey `json:"keys"`
}

// keyringRequest is the body of POST /v1/keyring/{op}.
type keyringRequest struct {
	Key string `json:"key"` // base64, 16, 24 or 32 bytes
}

var keyringOps = []string{"install", "use", "remove"}

func (a *nodeAdapter) GossipKeys() ([]node.GossipKey, error) {
	ks, err := a.n.GossipKeys()
	return ks, classifyKeyring(err)
}

func (a *nodeAdapter) GossipKeyOp(op string, key []byte) error {
	var err error
	switch op {
	case "install":
		err = a.n.InstallGossipKey(key)
	case "use":
		err = a.n.UseGossipKey(key)
	case "remove":
		err = a.n.RemoveGossipKey(key)
	default:
		err = fmt.Errorf("%w: unknown keyring operation %q", errBadInput, op)
	}
	return classifyKeyring(err)
}

// errNotImplemented: the node cannot do this (501).
var errNotImplemented = errors.New("tenure: not supported by this node")

func classifyKeyring(err error) error {
	if errors.Is(err, node.ErrUnsupported) {
		return fmt.Errorf("%w: %w", errNotImplemented, err)
	}
	return classify(err)
}

func (a *api) keyringNode(w http.ResponseWriter) (keyringNode, bool) {
	kn, ok := a.cfg.Node.(keyringNode)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this node has no gossip keyring")
	}
	return kn, ok
}

func (a *api) keyring(w http.ResponseWriter, r *http.Request) {
	kn, ok := a.keyringNode(w)
	if !ok {
		return
	}
	keys, err := kn.GossipKeys()
	if err != nil {
		writeKeyringError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, keyringJSON{Node: a.cfg.Node.Status().Node, Keys: keys})
}

func (a *api) keyringOp(w http.ResponseWriter, r *http.Request) {
	kn, ok := a.keyringNode(w)
	if !ok {
		return
	}
	op := r.PathValue("op")
	known := false
	for _, o := range keyringOps {
		known = known || o == op
	}
	if !known {
		writeError(w, http.StatusNotFound, fmt.Sprintf("keyring operation %q: want one of %s", op, strings.Join(keyringOps, ", ")))
		return
	}
	var req keyringRequest
	if !decodeBody(w, r, &req) {
		return
	}
	key, err := cluster.ParseGossipKey(req.Key)
	if err != nil {
		writeErrorCode(w, http.StatusBadRequest, "invalid", `"key": `+err.Error())
		return
	}
	if err := kn.GossipKeyOp(op, key); err != nil {
		writeKeyringError(w, err)
		return
	}
	a.log.Info("gossip keyring changed", "op", op, "fingerprint", node.KeyFingerprint(key))
	a.keyring(w, r)
}

func writeKeyringError(w http.ResponseWriter, err error) {
	if errors.Is(err, errNotImplemented) {
		writeError(w, http.StatusNotImplemented, err.Error())
		return
	}
	writeNodeError(w, err)
}

func init() {
	register("keyring", "list or rotate the gossip encryption keys (list, install, use, remove)", runKeyring)
}

// runKeyring: tenure keyring list|install|use|remove [--key K] [--one].
func runKeyring(ctx context.Context, m *Main, args []string) error {
	usage := "keyring list|install|use|remove [--key BASE64] [--one] [--addr host:port]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(m.Stderr, "usage: tenure %s\n", usage)
		return errors.New("keyring: want a subcommand: list, install, use or remove")
	}
	op := args[0]
	if op != "list" && !contains(keyringOps, op) {
		return fmt.Errorf("keyring: unknown subcommand %q: want list, install, use or remove", op)
	}
	fs, cf := m.clientFlagSet("keyring "+op, usage)
	key := fs.String("key", m.getenv("TENURE_KEYRING_KEY"), "the key, base64 (env TENURE_KEYRING_KEY; `tenure keygen` makes one)")
	one := fs.Bool("one", false, "only the agent at --addr, not every member it knows")
	if err := noArgs(fs, args[1:]); err != nil {
		return err
	}
	if op == "list" && *key != "" {
		return errors.New("keyring list takes no --key")
	}
	if op != "list" {
		if _, err := cluster.ParseGossipKey(*key); err != nil {
			return fmt.Errorf("keyring %s: --key: %v", op, err)
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	targets := []*apiClient{c}
	if !*one {
		if targets, err = memberClients(ctx, c, cf); err != nil {
			return err
		}
	}
	var results []keyringJSON
	var errs []error
	for _, t := range targets {
		var kr keyringJSON
		var err error
		if op == "list" {
			_, err = t.call(ctx, http.MethodGet, "/v1/keyring", nil, &kr)
		} else {
			_, err = t.call(ctx, http.MethodPost, "/v1/keyring/"+op, keyringRequest{Key: *key}, &kr)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.base, err))
			continue
		}
		results = append(results, kr)
	}
	if cf.json {
		if err := m.print(cf, results, nil); err != nil {
			return err
		}
	} else {
		keyringTable(m.Stdout, results)
	}
	if len(errs) > 0 {
		return fmt.Errorf("keyring %s: %d of %d agents failed (run it again: every step is idempotent except removing the primary): %w",
			op, len(errs), len(targets), errors.Join(errs...))
	}
	return nil
}

// memberClients returns a client for every member c's agent lists with an
// HTTP address, with c's token and TLS settings.
func memberClients(ctx context.Context, c *apiClient, cf *clientFlags) ([]*apiClient, error) {
	var members []memberJSON
	if _, err := c.call(ctx, http.MethodGet, "/v1/members", nil, &members); err != nil {
		return nil, fmt.Errorf("keyring: list members: %w", err)
	}
	var out []*apiClient
	var missing []string
	for _, mb := range members {
		if mb.HTTPAddr == "" {
			missing = append(missing, mb.ID)
			continue
		}
		mcf := *cf
		mcf.addr = mb.HTTPAddr
		mc, err := mcf.client()
		if err != nil {
			return nil, err
		}
		out = append(out, mc)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("keyring: members %v gossip no HTTP address: rotate them with --one --addr", missing)
	}
	return out, nil
}

func keyringTable(w io.Writer, rs []keyringJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKEY\tPRIMARY")
	for _, r := range rs {
		for _, k := range r.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%t\n", r.Node, k.Fingerprint, k.Primary)
		}
	}
	_ = tw.Flush()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
