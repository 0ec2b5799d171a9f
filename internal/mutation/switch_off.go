//go:build !mutations

package mutation

// Enabled reports whether the switches are compiled in (build tag
// "mutations"). Without the tag every rule is always in force.
const Enabled = false

// Set panics: the switches are not compiled in. Check Enabled first.
func Set(s Switch) (restore func()) {
	panic("mutation: Set(" + s.String() + ") in a build without -tags mutations; check mutation.Enabled")
}

// On reports false: without the build tag every rule is in force. The
// compiler inlines it, so the guards that call it cost nothing.
func On(Switch) bool { return false }
