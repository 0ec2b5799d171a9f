//go:build tools

package tier3

// The package TestExactReplay compiles for wasip1; importing it here keeps
// the tenure module (and the tier-2 test's dependencies) in this module's
// requirements.
import _ "github.com/tenurehq/tenure/simulation/tier2"
