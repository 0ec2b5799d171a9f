// Package tier2 runs the real components of tenure — real memberlist
// gossip, the real Raft control group, the real ledger state machine,
// planner, leader loop, tracker and node API — over in-memory networks
// (node.MemNetwork) inside testing/synctest bubbles, injects faults from a
// seeded source and checks the guarantees S1–S4 and L1 from what the
// components do.
//
// A Scenario names the cluster, the application (App: workers, job
// handling, state machines — the application's own code, run as in
// production) and the faults. Test runs one scenario in its own bubble;
// Run runs one inside the caller's bubble.
//
// Natively, runs are not byte-identical: the Go scheduler interleaves the
// real goroutines differently from run to run, so a seed reproduces a
// run's fault schedule and the networks' random decisions, not its exact
// history. Every failure prints the seed anyway. Compiled for wasip1 and
// run under wazero (simulation/tier3), a seed replays byte-identically;
// Result.Trace digests the history to show it.
// Within a bubble all nodes read one clock, so clock drift is not
// modelled here (tier 1, package simulation, models it).
//
// See docs/simulation-tier2.md.
package tier2
