package httpapi

import (
	"context"
	"net/http"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Fenced takeover (docs/guarantees.md, S4 waived): GET /v1/fenced lists the
// shards under it; POST /v1/fenced changes it (write scope: an operator
// action committed by the control group; 409 before cluster version 4 is
// finalized, 400 for shards that do not exist).

// FencedBackend is the optional part of a Backend that keeps the
// fenced-takeover policy; without it /v1/fenced answers 501.
type FencedBackend interface {
	FencedPolicy() (apitypes.FencedPolicy, error)
	// SetFenced wraps ErrConflict while the cluster version does not
	// allow it yet, ErrBadInput for a bad range.
	SetFenced(ctx context.Context, req apitypes.FencedRequest) error
}

func (a *nodeAdapter) FencedPolicy() (apitypes.FencedPolicy, error) {
	rs, err := a.n.FencedShards()
	if err != nil {
		return apitypes.FencedPolicy{}, classify(err)
	}
	out := apitypes.FencedPolicy{Ranges: []apitypes.FencedRange{}}
	for _, r := range rs {
		out.Ranges = append(out.Ranges, apitypes.FencedRange{First: r.First, Last: r.Last})
	}
	return out, nil
}

func (a *nodeAdapter) SetFenced(ctx context.Context, req apitypes.FencedRequest) error {
	return classify(a.n.SetFencedTakeover(ctx, req.First, req.Last, req.Fenced))
}

func (h *Handler) fencedPolicy(w http.ResponseWriter, r *http.Request) {
	fb, ok := optional[FencedBackend](h, w, "this node keeps no fenced-takeover policy")
	if !ok {
		return
	}
	p, err := fb.FencedPolicy()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) setFenced(w http.ResponseWriter, r *http.Request) {
	var req apitypes.FencedRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.First > req.Last {
		writeError(w, http.StatusBadRequest, "first after last")
		return
	}
	fb, ok := optional[FencedBackend](h, w, "this node keeps no fenced-takeover policy")
	if !ok {
		return
	}
	if err := fb.SetFenced(r.Context(), req); err != nil {
		writeNodeError(w, err)
		return
	}
	h.log.Info("fenced takeover policy", "first", req.First, "last", req.Last, "fenced", req.Fenced)
	p, err := fb.FencedPolicy()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
