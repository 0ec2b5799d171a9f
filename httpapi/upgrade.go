package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/node"
)

// Rolling upgrades (docs/upgrades.md): GET /v1/upgrade shows the cluster
// version, what each node speaks and what blocks finalizing; POST
// /v1/upgrade/finalize raises it (irreversible).

func (a *nodeAdapter) UpgradeStatus() (apitypes.UpgradeStatus, error) {
	us, err := a.n.UpgradeStatus()
	return us, classify(err)
}

func (a *nodeAdapter) FinalizeUpgrade(ctx context.Context) (apitypes.UpgradeStatus, error) {
	us, err := a.n.FinalizeUpgrade(ctx)
	if errors.Is(err, node.ErrNothingToFinalize) {
		return us, fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return us, classify(err)
}

func (h *Handler) upgradeStatus(w http.ResponseWriter, r *http.Request) {
	un, ok := optional[UpgradeBackend](h, w, "this node has no cluster version")
	if !ok {
		return
	}
	us, err := un.UpgradeStatus()
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, us)
}

func (h *Handler) upgradeFinalize(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	un, ok := optional[UpgradeBackend](h, w, "this node has no cluster version")
	if !ok {
		return
	}
	us, err := un.FinalizeUpgrade(r.Context())
	if err != nil {
		writeNodeError(w, err)
		return
	}
	h.log.Warn("cluster version finalized: nodes can no longer go back to a binary that does not speak it", "version", us.Active)
	writeJSON(w, http.StatusOK, us)
}
