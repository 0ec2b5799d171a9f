//go:build mutations

package mutation

import (
	"os"
	"sync/atomic"
)

// Enabled reports whether the switches are compiled in (build tag
// "mutations").
const Enabled = true

var active atomic.Int32

func init() {
	if s, ok := ByName(os.Getenv(EnvSwitch)); ok {
		active.Store(int32(s))
	}
}

// Set turns on exactly one switch (None turns all off) and returns a
// function that restores the previous one.
func Set(s Switch) (restore func()) {
	prev := active.Swap(int32(s))
	return func() { active.Store(prev) }
}

// On reports whether switch s is on. It is one atomic load.
func On(s Switch) bool { return Switch(active.Load()) == s }
