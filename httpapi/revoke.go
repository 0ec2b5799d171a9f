package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// The committed deny-list (docs/security.md, "Revoking a node"): GET
// /v1/revocations lists it (read scope); POST /v1/revocations revokes a
// node id and/or a certificate serial, or lifts an entry (admin scope;
// 409 before cluster version 5 is finalized).

// RevokeBackend is a Backend that keeps the deny-list.
type RevokeBackend interface {
	Revocations() (apitypes.Revocations, error)
	Revoke(ctx context.Context, req apitypes.RevokeRequest) error
}

func (a *nodeAdapter) Revocations() (apitypes.Revocations, error) {
	rs, err := a.n.Revocations()
	if err != nil {
		return apitypes.Revocations{}, classify(err)
	}
	out := apitypes.Revocations{Revoked: []apitypes.Revocation{}}
	for _, r := range rs {
		out.Revoked = append(out.Revoked, apitypes.Revocation{Node: r.Node, Serial: r.Serial, Reason: r.Reason, At: r.At.UTC()})
	}
	return out, nil
}

func (a *nodeAdapter) Revoke(ctx context.Context, req apitypes.RevokeRequest) error {
	return classify(a.n.RevokeNode(ctx, req.Node, req.Serial, req.Reason, req.Lift))
}

func (h *Handler) revocations(w http.ResponseWriter, r *http.Request) {
	rb, ok := optional[RevokeBackend](h, w, "this node keeps no deny-list")
	if !ok {
		return
	}
	rs, err := rb.Revocations()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rs)
}

func (h *Handler) revoke(w http.ResponseWriter, r *http.Request) {
	var req apitypes.RevokeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if (req.Node == "" && node.NormalizeSerial(req.Serial) == "") || len(req.Node) > node.MaxStringLen ||
		len(req.Serial) > node.MaxStringLen || len(req.Reason) > node.MaxStringLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node or serial: one of them, each at most %d bytes (reason too)", node.MaxStringLen))
		return
	}
	rb, ok := optional[RevokeBackend](h, w, "this node keeps no deny-list")
	if !ok {
		return
	}
	if err := rb.Revoke(r.Context(), req); err != nil {
		writeNodeError(w, err)
		return
	}
	h.log.Info("node revocation", "node", req.Node, "serial", req.Serial, "lift", req.Lift, "reason", req.Reason)
	h.revocations(w, r)
}
