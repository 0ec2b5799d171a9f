// Package ownership turns ring proposals into committed shard ownership.
//
// Where things are decided (docs/protocol.md is the contract):
//
//   - planner.go — the leader's pure decision core. Planner.Establish (a new
//     leader honours leases it cannot see), Planner.Plan: observe (lastSeen /
//     revokeSeen from the committed table), expiries (the lease rule),
//     updateRing (eligibility, hysteresis, stickiness) and placement (grants,
//     takeovers, revokes under the churn budget). Output: sorted
//     ledger.Command proposals, each a compare-and-set.
//   - tracker.go — the node's pure lease logic: heartbeat asks and acks, the
//     apply wait, Acting(shard, now), the drain window, Release/Transfer
//     handoffs, acting-set Changes for the workers.
//   - leader.go — the leader's pure core around the Planner: Leader.Step(now,
//     LeaderInput) → LeaderReady decides when a term is established (a
//     Barrier, then the voters' bound clamped by EstablishBound), when a
//     round runs, what its outcomes mean and when the next one is due;
//     InputOf builds the planner's input for every caller; VotersBound is
//     the voters' confirm bound a shell asks for.
//   - config.go — timings and policy, profiles (Fast/Default/Safe/Test).
//
// The goroutine shell that carries out the Leader's Readys on the control
// group's leader (Barrier, bound, commits, timers, coalesced
// notifications) is node's (node/leaderloop.go); the simulator is the
// other shell.
//
// The planner, the leader core and the tracker read no clock, start no goroutines and do no
// I/O: node/ and the simulator (simulation/) drive the very same code.
package ownership
