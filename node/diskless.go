package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/internal/mutation"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ledger/raftstore"
)

// A disk-less member (docs/operations.md, "Disk-less members") is a node
// that never votes in the control group and keeps nothing across
// restarts: its Raft log, stable store and snapshots live in memory and
// its replica of the ledger is rebuilt from the leader (a snapshot, then
// the log) at every start; its node id comes from Config.NodeID
// ($HOSTNAME); and its incarnation, which a node with a data dir counts
// on disk, is claimed from the control group (ledger.ClaimIncarnation):
// one above the id's record, so fencing tells this process from every
// earlier one exactly as it does for a node with a disk.

// diskless reports whether c describes a disk-less member: Diskless set,
// or a real network with no DataDir and Voter=never.
func (c Config) diskless() bool {
	if c.Diskless {
		return true
	}
	return c.Network == nil && c.DataDir == "" && c.Voter == VoterNever
}

// validateDiskless reports what is wrong with a disk-less configuration.
func (c Config) validateDiskless(bad func(string, ...any)) {
	if !c.diskless() {
		return
	}
	if c.Voter != VoterNever {
		bad("Voter %q without DataDir: a control-group voter keeps its Raft log, term and vote on disk; set DataDir, or Voter=%q for a disk-less member", c.Voter, VoterNever)
	}
	if c.DataDir != "" {
		bad("Diskless with DataDir %q: a disk-less member keeps no data dir; unset one of them", c.DataDir)
	}
	if len(c.Seeds) == 0 {
		bad("Seeds empty for a disk-less member: it joins a running cluster (its voters keep the state) and cannot start one")
	}
}

// disklessStore is a disk-less member's Raft storage: memory, empty at
// every start.
func disklessStore() *raftstore.Store {
	log := raft.NewInmemStore()
	return &raftstore.Store{Log: log, Stable: log, Snapshots: raft.NewInmemSnapshotStore()}
}

// incarnationClaimer is what claiming an incarnation takes from the
// control plane: proposing before the leader knows this node, and
// recording the incarnation for a graceful leave.
type incarnationClaimer interface {
	ApplyViaPeers(ctx context.Context, cmd []byte) (ledger.Result, error)
	SetIncarnation(inc uint64)
}

// disklessClaimTimeout bounds how long a disk-less member waits for the
// control group to give it an incarnation when the start context has no
// earlier deadline.
const disklessClaimTimeout = 2 * time.Minute

// errClusterVersionPending marks a claim refused because the cluster has
// not recorded its configuration (and so its version) yet: a new cluster
// does so as soon as its first leader leads; the member asks again.
var errClusterVersionPending = errors.New("node: the cluster has not recorded its version yet")

// checkClaim is the leader's check of an incarnation claim before it
// proposes it: the cluster must run ledger.VersionDisklessMembers, or
// replicas of an older binary would meet an entry they cannot read.
func checkClaim(st *ledger.State, c ledger.Command) error {
	if _, ok := ledger.Unwrap(c).(ledger.ClaimIncarnation); !ok {
		return nil
	}
	switch {
	case st.Cluster().Name == "":
		return errClusterVersionPending
	case !st.VersionActive(ledger.VersionDisklessMembers):
		return fmt.Errorf("%w: disk-less members need cluster version %d; the cluster runs version %d (finish the upgrade first: docs/upgrades.md)",
			ledger.ErrVersion, ledger.VersionDisklessMembers, st.ActiveVersion())
	}
	return nil
}

// claimIncarnation asks the control group for this disk-less member's
// incarnation and returns it with the claim's log index. It retries while no leader answers or the
// cluster has not recorded its version; a cluster that runs a version
// older than ledger.VersionDisklessMembers is an error that says so
// (wrapping ErrDisklessUnsupported).
//
// Every attempt carries the same request id (a ledger.Session, which
// every cluster that takes claims reads: ledger.VersionRequestIDs is
// below ledger.VersionDisklessMembers; no log or wire change). An attempt
// that timed out may still commit after its retry: without the id it took
// the next incarnation, above the one the retry returned, and this
// process then met "its own" newer record at its first heartbeat and
// exited with ErrIdentityConflict (docs/benchmarks.md, issue 24). With it
// the first of the attempts to apply claims, and every later one answers
// that claim's result (Result.Replayed) and changes nothing. (The ledger
// remembers a claim's id as at time 0 — a claim has no session clock —
// so an id is dropped with the first eviction of the session window that
// reaches it: a late attempt still behind a window's worth of other
// sessions would claim anew.)
func (b *netBackend) claimIncarnation(ctx context.Context, cl incarnationClaimer) (inc, index uint64, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, disklessClaimTimeout)
		defer cancel()
	}
	hi := ledger.MaxClusterVersion
	if b.ocfg.MaxVersion != 0 {
		// As the agent advertises (ownership.Config.MaxVersion): a test's
		// stand-in for an older binary.
		hi = max(ledger.MinClusterVersion, min(ledger.MaxClusterVersion, b.ocfg.MaxVersion))
	}
	var last error
	rid := ledger.NewRequestID()
	for {
		var cmd ledger.Command = ledger.ClaimIncarnation{Node: b.id, Now: time.Now().UnixNano(),
			MinVersion: ledger.MinClusterVersion, MaxVersion: hi}
		if !mutation.On(mutation.ClaimWithoutRequestID) {
			cmd = ledger.Session{ID: rid, Command: cmd}
		}
		data, err := ledger.Encode(cmd)
		if err != nil {
			return 0, 0, err
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := cl.ApplyViaPeers(actx, data)
		cancel()
		if err == nil {
			err = r.Err
		}
		switch {
		case err == nil:
			return r.Node.Incarnation, r.Index, nil
		case errors.Is(err, ledger.ErrVersion) || strings.Contains(err.Error(), ledger.ErrVersion.Error()):
			// Refused by the leader's check (the message crossed the RPC
			// as text) or by the ledger: permanent until the cluster is
			// upgraded.
			return 0, 0, fmt.Errorf("%w: %v", ErrDisklessUnsupported, err)
		case errors.Is(err, ErrUnauthorized), errors.Is(err, cluster.ErrControlClosed):
			return 0, 0, fmt.Errorf("node: claim an incarnation for disk-less member %q: %w", b.id, err)
		}
		// No leader yet, the cluster's version not recorded yet, or an
		// unknown outcome: a retried claim only takes the next number.
		last = err
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("node: disk-less member %q got no incarnation from the control group: %w (last: %v)", b.id, ctx.Err(), last)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// ApplyViaPeers implements incarnationClaimer.
func (c *clusterControl) ApplyViaPeers(ctx context.Context, cmd []byte) (ledger.Result, error) {
	return c.result(c.g.ApplyViaPeers(ctx, cmd))
}

// SetIncarnation implements incarnationClaimer.
func (c *clusterControl) SetIncarnation(inc uint64) { c.g.SetIncarnation(inc) }
