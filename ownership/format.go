package ownership

import "github.com/tenurehq/tenure/ledger"

// FormatCommand renders a proposal in one short line, for logs, traces and
// test scripts: each kind's form is declared with it in ledger
// (ledger.FormatCommand).
func FormatCommand(c ledger.Command) string { return ledger.FormatCommand(c) }
