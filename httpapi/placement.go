package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// Operator placement rules (docs/ring.md): GET /v1/placement lists pins
// and exclusions; POST /v1/placement/pin and /v1/placement/exclude change
// them (write scope: they are operator actions, committed by the control
// group; 409 before cluster version 3 is finalized).

func (a *nodeAdapter) PlacementRules() (apitypes.PlacementRules, error) {
	r, err := a.n.PlacementRules()
	if err != nil {
		return apitypes.PlacementRules{}, classify(err)
	}
	out := apitypes.PlacementRules{Pins: []apitypes.Pin{}, Excluded: []apitypes.Exclusion{}}
	for _, p := range r.Pins {
		out.Pins = append(out.Pins, apitypes.Pin{Shard: p.Shard, Node: p.Node, Reason: p.Reason, At: p.At.UTC()})
	}
	for _, e := range r.Excluded {
		out.Excluded = append(out.Excluded, apitypes.Exclusion{Node: e.Node, Reason: e.Reason, At: e.At.UTC()})
	}
	return out, nil
}

func (a *nodeAdapter) Pin(ctx context.Context, req apitypes.PinRequest) error {
	return classify(a.n.PinShard(ctx, req.Shard, req.Node, req.Reason))
}

func (a *nodeAdapter) Exclude(ctx context.Context, req apitypes.ExcludeRequest) error {
	if req.Exclude {
		return classify(a.n.ExcludeNode(ctx, req.Node, req.Reason))
	}
	return classify(a.n.IncludeNode(ctx, req.Node))
}

func (h *Handler) placementRules(w http.ResponseWriter, r *http.Request) {
	pn, ok := optional[PlacementBackend](h, w, "this node keeps no placement rules")
	if !ok {
		return
	}
	rules, err := pn.PlacementRules()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rules)
}

func (h *Handler) pin(w http.ResponseWriter, r *http.Request) {
	var req apitypes.PinRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.Node) > node.MaxStringLen || len(req.Reason) > node.MaxStringLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node and reason: at most %d bytes each", node.MaxStringLen))
		return
	}
	h.placementChange(w, r, func(ctx context.Context, pn PlacementBackend) error { return pn.Pin(ctx, req) },
		"placement pin", "shard", req.Shard, "node", req.Node, "reason", req.Reason)
}

func (h *Handler) exclude(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ExcludeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Node == "" || len(req.Node) > node.MaxStringLen || len(req.Reason) > node.MaxStringLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node: 1..%d bytes; reason: at most %d", node.MaxStringLen, node.MaxStringLen))
		return
	}
	h.placementChange(w, r, func(ctx context.Context, pn PlacementBackend) error { return pn.Exclude(ctx, req) },
		"placement exclusion", "node", req.Node, "exclude", req.Exclude, "reason", req.Reason)
}

func (h *Handler) placementChange(w http.ResponseWriter, r *http.Request, change func(context.Context, PlacementBackend) error, msg string, args ...any) {
	pn, ok := optional[PlacementBackend](h, w, "this node keeps no placement rules")
	if !ok {
		return
	}
	if err := change(r.Context(), pn); err != nil {
		writeNodeError(w, err)
		return
	}
	h.log.Info(msg, args...)
	rules, err := pn.PlacementRules()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rules)
}
