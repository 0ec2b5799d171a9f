//go:build unix && !linux

package bench

import "syscall"

func deathSignalAttr() *syscall.SysProcAttr { return nil }
