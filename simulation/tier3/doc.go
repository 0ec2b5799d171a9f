// Package tier3 is the simulator's exact-replay tier: it compiles the
// tier-2 scenarios (package simulation/tier2: real memberlist, real raft,
// real node code inside testing/synctest bubbles) for GOOS=wasip1 and runs
// them under the wazero WebAssembly runtime, whose clocks and random
// source are fixed by default. One wasm thread, one schedule: the same
// seed gives a byte-identical run — the same trace digest of every apply,
// worker term and acknowledgement, and the same test output — every time,
// which tier 2 under the native Go scheduler cannot promise.
//
// It is a module of its own (wazero stays out of the library's go.mod)
// and replaces github.com/hashicorp/go-sockaddr, which has no wasip1 code,
// with a small stand-in (sockaddrstub). Run it with `make tier3`.
package tier3
