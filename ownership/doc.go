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
//   - leaderloop.go — the thin shell that runs the Planner on the control
//     group's leader (Barrier, Establish, coalesced rounds, commits) behind
//     narrow interfaces (Proposer, Source, Clock).
//   - config.go — timings and policy, profiles (Fast/Default/Safe/Test).
//
// The planner and the tracker read no clock, start no goroutines and do no
// I/O: node/ and the simulator (simulation/) drive the very same code.
package ownership
