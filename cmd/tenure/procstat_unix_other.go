//go:build unix && !linux

package main

import "syscall"

func deathSignalAttr() *syscall.SysProcAttr { return nil }
