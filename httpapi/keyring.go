package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// The gossip keyring over the API. Rotation is three rounds, each done on
// every node before the next (docs/security.md): install the new key, use
// it, remove the old one.

func (a *nodeAdapter) GossipKeys() ([]apitypes.GossipKey, error) {
	ks, err := a.n.GossipKeys()
	if err != nil {
		return nil, classify(err)
	}
	out := make([]apitypes.GossipKey, len(ks))
	for i, k := range ks {
		out[i] = apitypes.GossipKey{Fingerprint: k.Fingerprint, Primary: k.Primary}
	}
	return out, nil
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
		err = fmt.Errorf("%w: unknown keyring operation %q", ErrBadInput, op)
	}
	return classify(err)
}

func (h *Handler) keyring(w http.ResponseWriter, r *http.Request) {
	kn, ok := optional[KeyringBackend](h, w, "this node has no gossip keyring")
	if !ok {
		return
	}
	keys, err := kn.GossipKeys()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apitypes.Keyring{Node: h.node.Status().Node, Keys: nonNil(keys)})
}

func (h *Handler) keyringOp(w http.ResponseWriter, r *http.Request) {
	kn, ok := optional[KeyringBackend](h, w, "this node has no gossip keyring")
	if !ok {
		return
	}
	op := r.PathValue("op")
	if !slices.Contains(apitypes.KeyringOps, op) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("keyring operation %q: want one of %s", op, strings.Join(apitypes.KeyringOps, ", ")))
		return
	}
	var req apitypes.KeyringRequest
	if !decodeBody(w, r, &req) {
		return
	}
	key, err := node.ParseGossipKey(req.Key)
	if err != nil {
		writeCode(w, apitypes.CodeInvalid, `"key": `+err.Error())
		return
	}
	if err := kn.GossipKeyOp(op, key); err != nil {
		writeNodeError(w, err)
		return
	}
	h.log.Info("gossip keyring changed", "op", op, "fingerprint", node.KeyFingerprint(key))
	h.keyring(w, r)
}
