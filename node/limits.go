package node

import "github.com/tenurehq/tenure/ledger"

// Input limits an embedder (the HTTP API, a CLI) checks before it asks:
// they are the ledger's, re-exported so callers of node need not import
// ledger.
const (
	// MaxStringLen bounds every string a command carries: job keys and
	// types, node ids, reasons.
	MaxStringLen = ledger.MaxStringLen
	// DefaultMaxPayload is the default bound on a job payload or result
	// and an App payload (the cluster's may differ once logged).
	DefaultMaxPayload = ledger.DefaultMaxPayload
)

// NormalizeSerial is the form a certificate serial takes on the deny-list
// (lower-case hex, no separators or leading zeros): the ledger's rule,
// re-exported for the HTTP API and the CLI.
func NormalizeSerial(s string) string { return ledger.NormalizeSerial(s) }
