//go:build !unix

package bench

import (
	"syscall"
	"time"
)

func processCPU() time.Duration           { return 0 }
func processRSSMB() float64               { return 0 }
func pidRSSMB(int) float64                { return 0 }
func pidStatusMB(int, string) float64     { return 0 }
func pidCPU(int) time.Duration            { return 0 }
func childProcAttr() *syscall.SysProcAttr { return nil }
