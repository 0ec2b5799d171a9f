package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// GET /v1/debug/digest?index=N: a hash of the node's replicated state right
// after it applied log index N (node.StateDigest). Ask every node for the
// same N, a little ahead of their applied indexes: replicas that applied
// the same log answer the same digest. The call waits up to 10 s.

// DigestBackend is the part of a Backend that hashes its replica.
type DigestBackend interface {
	StateDigest(ctx context.Context, index uint64) (uint64, error)
}

func (a *nodeAdapter) StateDigest(ctx context.Context, index uint64) (uint64, error) {
	d, err := a.n.StateDigest(ctx, index)
	return d, classify(err)
}

// digestJSON is the answer of GET /v1/debug/digest.
type digestJSON struct {
	Node   string `json:"node"`
	Index  uint64 `json:"index"`
	Digest string `json:"digest"` // 16 hex digits
}

func (h *Handler) digest(w http.ResponseWriter, r *http.Request) {
	db, ok := optional[DigestBackend](h, w, "this node cannot hash its replica")
	if !ok {
		return
	}
	index, err := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if err != nil || index == 0 {
		writeError(w, http.StatusBadRequest, "index: want a log index ≥ 1")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d, err := db.StateDigest(ctx, index)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, digestJSON{Node: h.node.Status().Node, Index: index, Digest: fmt.Sprintf("%016x", d)})
}
