package simulation

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ownership"
)

var (
	flagMutationsOut   = flag.String("mutations.out", "", "TestMutations: write the per-mutation report (mutations.json) here")
	flagMutationsSeeds = flag.Int("mutations.seeds", 500, "TestMutations: seeds of the sweep each mutation gets")
)

// MutationReport is one entry of mutations.json.
type MutationReport struct {
	Name string `json:"name"`
	Rule string `json:"rule"`
	// CaughtBy is "sweep", "tier2", "test" (a named test, testCaught) or
	// "" (not caught).
	CaughtBy     string `json:"caught_by"`
	SeedsToCatch int    `json:"seeds_to_catch"`
	// Seed and Violation describe the first catch (replay with
	// -sim.seed, under the mutation).
	Seed      uint64 `json:"seed,omitempty"`
	Violation string `json:"violation,omitempty"`
}

// mutationConfig is the sweep's configuration for seed under m: the
// sweep's own profile (QuickConfig) with the stress faults, or the
// scenario the rule needs (clock drift, leader changes, restarts mid-drain).
func mutationConfig(m mutation.Switch, seed uint64) Config {
	cfg := QuickConfig(seed)
	cfg.Stress = true
	switch m {
	case mutation.NoDriftMargin:
		cfg = driftConfig(seed, 1-cfg.Ownership.MaxDrift)
	case mutation.IgnoreEstablish:
		cfg = leaderChangeConfig(seed)
	case mutation.ActOnRevoking:
		cfg = revokeRestartConfig(seed)
	case mutation.RenewWithoutConfirm:
		cfg = depositionConfig(seed)
	case mutation.EstablishIgnoresBound, mutation.LeaderKeepsTerm:
		cfg = leaderChangeConfig(seed)
	case mutation.RenewWithoutApplyWait:
		cfg = slowRevokeConfig(seed)
	case mutation.RenewWhileExpiring:
		cfg = expiringConfig(seed)
	case mutation.DrainIgnoresLease:
		cfg = drainCutConfig(seed)
	case mutation.LeaveExpiredShards, mutation.NoRebalance:
		// Liveness rules: judged only at the end of a full-length run.
		cfg = DefaultConfig(seed)
		cfg.Stress = true
	case mutation.NoHandoff:
		cfg = handoffConfig(seed)
	case mutation.WordPastLease, mutation.NoWordBurn, mutation.RetargetAfterWord:
		cfg = wordsConfig(seed)
	case mutation.GatedWhileMixed:
		// A rolling upgrade from version-3 binaries: until the leader
		// finalizes, the cluster runs version 3 and refuses what version
		// 4 introduced.
		cfg = upgradeConfig(seed)
	case mutation.SkipApplyWait:
		// A lease extended before the replica applied the heartbeat lets a
		// node act past a Revoke it has not applied yet; with a drain as
		// long as the lease (the default) the takeover wait covers most of
		// those windows, so this rule gets the ownership test profile's
		// short drain (caught at seed 108 with it, 304 without).
		cfg.Ownership.DrainTimeout = ownership.TestConfig().DrainTimeout
	}
	if seed%2 == 0 && !scenarioOnly[m] {
		drain := cfg.Ownership.DrainTimeout
		cfg = DefaultConfig(seed) // every other seed: a full-length run
		cfg.Stress = true
		cfg.Ownership.DrainTimeout = drain
	}
	if m == mutation.SkipApplyWait {
		// The rule is the heartbeat's: from cluster version 4 on a
		// heartbeat's ack extends no lease (renew-without-apply-wait is
		// the renewal's), so its sweep runs clusters of version-3
		// binaries.
		cfg.ClusterVersion = ledger.VersionLeaseRenewals - 1
	}
	if m == mutation.DrainIgnoresLease {
		// The rule is the tracker's, at any version; but from version 6 a
		// drained shard's target acts on the old owner's word and the
		// Transfer follows at once, so a draining owner is rarely still
		// draining at its lease end (not caught within 500 seeds at 6).
		// Its sweep runs version-5 binaries: the handoff waits for the
		// commit, as in a cluster mixed with the previous release.
		cfg.ClusterVersion = ledger.VersionHandoffWords - 1
	}
	cfg.StopAtFirstViolation = true
	return cfg
}

// scenarioOnly are the mutations whose every seed runs their scenario (the
// others run a full-length stress run every other seed).
var scenarioOnly = map[mutation.Switch]bool{
	mutation.NoDriftMargin: true, mutation.IgnoreEstablish: true, mutation.ActOnRevoking: true,
	mutation.RenewWithoutConfirm: true, mutation.EstablishIgnoresBound: true, mutation.LeaderKeepsTerm: true,
	mutation.RenewWithoutApplyWait: true, mutation.RenewWhileExpiring: true, mutation.DrainIgnoresLease: true,
	mutation.LeaveExpiredShards: true, mutation.NoRebalance: true, mutation.NoHandoff: true, mutation.GatedWhileMixed: true,
	mutation.WordPastLease: true, mutation.NoWordBurn: true, mutation.RetargetAfterWord: true,
}

// tier2Only are the mutations of code only tier 2 runs (the real control
// group): the sweep skips them and TestTier2Mutations has their scenario.
var tier2Only = map[mutation.Switch]bool{mutation.StreamResumeSkips: true}

// testCaught are the mutations of rules the simulator does not model
// (certificates, the Raft/RPC port): each is caught by a named test, run
// under the switch in a child `go test -tags mutations` (the switch set
// through mutation.EnvSwitch). The test must fail under it; that it passes
// without it is make test's job.
var testCaught = map[mutation.Switch]struct{ pkg, test string }{
	mutation.MemberProposesOperatorKinds: {"./ledger/", "TestAuthorizeTable"},
	mutation.HandshakeSkipsDenyList:      {"./node/", "TestRevokedNodeIsRefused"},
	mutation.WordsSkipConfirm:            {"./cluster/", "TestWordsNeedConfirmedLeadership"},
	mutation.ReleaseDuringWord:           {"./ledger/", "TestHandoffRefusals"},
	mutation.TransferPastTarget:          {"./ledger/", "TestHandoffRefusals"},
	mutation.WordsUnauthenticated:        {"./cluster/", "TestWordsNeedAuthentication"},
	mutation.WordFromAnyone:              {"./node/", "TestRelayableNeedsProof"},
	mutation.FinalizeIgnoresGossip:       {"./ownership/", "TestFinalizeWaitsForGossipUpNodes"},
	mutation.FeedSkipsOwners:             {"./ledger/", "TestChangeFeedEqualsFullPass"},
	mutation.ClaimWithoutRequestID:       {"./node/", "TestDisklessClaimLateAttempt"},
	mutation.VoterDropsRaft:              {"./cluster/", "TestVoterNeverDropsRaft"},
	mutation.WordStaleRecord:             {"./ownership/", "TestWordValidRefusesStaleRecord"},
	mutation.OwnerWordNoApplyWait:        {"./cluster/", "TestOwnerWordWaitsForLaggingReplica"},
	mutation.AuthorizeRaftApplied:        {"./cluster/", "TestAuthorizeWaitsForLaggingFSM"},
	mutation.AgentFeedSkipsChanges:       {"./ownership/", "TestObservedSinceEqualsFull"},
}

// testMutation runs m's catching test under m and reports whether it
// failed, with its first failure line as the violation.
func testMutation(t *testing.T, m mutation.Switch) MutationReport {
	tc := testCaught[m]
	rep := MutationReport{Name: m.String(), Rule: m.Rule(), SeedsToCatch: 1}
	cmd := exec.Command("go", "test", "-count=1", "-tags", "mutations", "-run", "^"+tc.test+"$", tc.pkg)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), mutation.EnvSwitch+"="+m.String())
	out, err := cmd.CombinedOutput()
	if err == nil {
		return rep
	}
	marker := "--- FAIL: " + tc.test
	if !strings.Contains(string(out), marker) {
		t.Errorf("mutation %s: %s did not run (%v):\n%s", m, tc.test, err, out)
		return rep
	}
	rep.CaughtBy, rep.Violation = "test", tc.test+" failed"
	for _, line := range strings.Split(string(out), "\n") {
		if l := strings.TrimSpace(line); strings.Contains(l, "_test.go:") {
			rep.Violation = tc.test + ": " + l
			break
		}
	}
	return rep
}

// sweepMutation runs up to seeds seeds under m and returns the first catch.
func sweepMutation(t *testing.T, m mutation.Switch, seeds int) MutationReport {
	restore := mutation.Set(m)
	defer restore()
	rep := MutationReport{Name: m.String(), Rule: m.Rule()}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		res, err := Run(mutationConfig(m, seed))
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed() {
			rep.CaughtBy, rep.SeedsToCatch, rep.Seed, rep.Violation = "sweep", int(seed), seed, res.Violations[0].String()
			return rep
		}
	}
	rep.SeedsToCatch = seeds
	return rep
}

// TestMutations turns on every registered mutation (internal/mutation) in
// turn and runs the sweep under it (-mutations.seeds seeds at most,
// stopping at the first violation). Each must be caught; with
// -mutations.out the report is written as JSON, and the ones the sweep
// missed are left for tier 2 (make mutations runs TestTier2MutationsReport
// on the file next). A harness that cannot fail is worthless.
func TestMutations(t *testing.T) {
	if !mutation.Enabled {
		t.Skip(mutation.SkipReason)
	}
	if testing.Short() {
		t.Skip("mutations take a while")
	}
	var out []MutationReport
	for _, m := range mutation.All() {
		if _, ok := testCaught[m]; ok {
			rep := testMutation(t, m)
			out = append(out, rep)
			if rep.CaughtBy == "" {
				t.Errorf("mutation %s (%s) not caught by %s", m, m.Rule(), testCaught[m].test)
			} else {
				t.Logf("%-28s caught by %s", m, rep.Violation)
			}
			continue
		}
		if tier2Only[m] {
			// The sweep does not run this code: tier 2 catches it
			// (TestTier2Mutations; make mutations' second step).
			out = append(out, MutationReport{Name: m.String(), Rule: m.Rule()})
			t.Logf("%-28s left for tier 2 (the sweep does not run the code it breaks)", m)
			continue
		}
		rep := sweepMutation(t, m, *flagMutationsSeeds)
		out = append(out, rep)
		if rep.CaughtBy == "" {
			if *flagMutationsOut == "" {
				t.Errorf("mutation %s (%s) not caught by the sweep within %d seeds", m, m.Rule(), rep.SeedsToCatch)
			} else {
				t.Logf("mutation %s not caught by the sweep within %d seeds: left for tier 2", m, rep.SeedsToCatch)
			}
			continue
		}
		t.Logf("%-28s caught at seed %d: %s", m, rep.Seed, rep.Violation)
	}
	if *flagMutationsOut != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*flagMutationsOut, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
