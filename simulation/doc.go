// Package simulation is tenure's deterministic simulation harness. It drives
// the real leader core (ownership.Leader and its Planner; leader.go carries
// out its Readys), the real ledger state machine and the real node-side lease
// logic (ownership.Agent) in a single-threaded discrete-event loop under a
// seeded random source, injects faults (crashes, pauses, partitions, clock
// drift, lost proposals) and checks the safety (S1–S4) and liveness (L1–L3)
// guarantees on every event.
//
// It must not: re-implement any rule it checks, use goroutines or the wall
// clock, or iterate maps unsorted.
package simulation
