package node

import (
	"testing/synctest"
	"time"
)

// settleBubble lets the goroutines that closed nodes leave behind finish
// before a synctest bubble ends. Inside a bubble time stops once the test
// function returns, and memberlist does not join its probe goroutines on
// Shutdown: a probe still waiting for its timer (state.go's `<-ackCh`) then
// fails the test with "main bubble goroutine has exited but blocked
// goroutines remain" (CI, TestDisklessMembers, once). Registered first with
// t.Cleanup, it runs last, after the test closed its nodes; the minute is
// virtual time and costs no wall time.
func settleBubble() {
	time.Sleep(time.Minute)
	synctest.Wait()
}
