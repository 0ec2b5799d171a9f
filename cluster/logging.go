package cluster

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/tenurehq/tenure/cluster/internal/logadapt"
)

// newRaftLogger is the hclog.Logger raft and its transport log to (see
// cluster/internal/logadapt).
func newRaftLogger(l *slog.Logger) hclog.Logger { return logadapt.NewRaftLogger(l) }
