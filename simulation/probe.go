package simulation

import (
	"time"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/simulation/history"
)

// Probes: a rogue or confused proposer (a delayed duplicate, a buggy
// client, a member past the Authorize check) commits commands built, from
// the committed state at the instant they commit, to break exactly one rule
// of the ledger's contract. The history checker demands each is rejected
// with the documented sentinel. They change nothing when the ledger is
// right; they make every validation rule of the FSM reachable, including
// those the honest protocol never tests (a grant over a valid owner, a
// release by a non-owner, a second start of a running job).

// probeShard is a shard no ring places (beyond every profile's
// partitions): it stays Unowned at epoch 0 unless a broken rule grants it.
const probeShard = 1 << 20

// probeEvery is the mean interval between probes (true time).
const probeEvery = 100 * time.Millisecond

func (s *Sim) scheduleProbe() {
	s.after(s.jitter(probeEvery/2, 3*probeEvery/2), evProbe, -1, func() {
		s.probe()
		s.scheduleProbe()
	})
}

// probe commits one probe, if the control group has a leader and the
// chosen kind has a target in the current state.
func (s *Sim) probe() {
	r := s.raft
	if r.leader < 0 {
		return
	}
	st := r.ref.State()
	from := s.rng.IntN(len(s.nodes))
	now := s.wall(s.nodes[from])
	commit := func(c ledger.Command, want error) { r.commitChecked(c, from, true, want) }
	// asOwner commits a command the contract accepts, from the shard's owner.
	asOwner := func(owner string, c ledger.Command) {
		for _, n := range s.nodes {
			if n.id == owner {
				r.commitChecked(c, n.idx, true, nil)
			}
		}
	}

	nodes := st.Nodes()
	var valid, revoking, invalid []ledger.ShardRecord
	for _, sh := range st.Shards() {
		switch {
		case sh.Shard == probeShard:
		case st.OwnershipValid(sh) && sh.State == ledger.ShardOwned:
			valid = append(valid, sh)
		case st.OwnershipValid(sh):
			revoking = append(revoking, sh)
		default:
			invalid = append(invalid, sh)
		}
	}
	pickShard := func(l []ledger.ShardRecord) (ledger.ShardRecord, bool) {
		if len(l) == 0 {
			return ledger.ShardRecord{}, false
		}
		return l[s.rng.IntN(len(l))], true
	}
	// other returns a node record other than id, matching its current record.
	other := func(id string) (ledger.NodeRecord, bool) {
		var c []ledger.NodeRecord
		for _, n := range nodes {
			if n.ID != id {
				c = append(c, n)
			}
		}
		if len(c) == 0 {
			return ledger.NodeRecord{}, false
		}
		return c[s.rng.IntN(len(c))], true
	}
	// job returns a job of shard sh matching pred.
	job := func(sh uint32, pred func(ledger.JobRecord) bool) (ledger.JobRecord, bool) {
		var c []ledger.JobRecord
		for _, state := range []ledger.JobState{ledger.JobPending, ledger.JobStarted, ledger.JobCompleted, ledger.JobDead} {
			for _, j := range st.Jobs(sh, state) {
				if pred(j) {
					c = append(c, j)
				}
			}
		}
		if len(c) == 0 {
			return ledger.JobRecord{}, false
		}
		return c[s.rng.IntN(len(c))], true
	}
	// startable: a job the shard's owner may start now. A start probe
	// picks one, so the rule it breaks is the only one that refuses it
	// (a state catch: with that rule off the ledger accepts it).
	startable := func(j ledger.JobRecord) bool { return j.State == ledger.JobPending && now >= j.NotBefore }
	// running: an attempt started at the shard's epoch (a finish at that
	// epoch and attempt is accepted).
	running := func(sh ledger.ShardRecord) func(ledger.JobRecord) bool {
		return func(j ledger.JobRecord) bool { return j.State == ledger.JobStarted && j.Epoch == sh.Epoch }
	}

	switch s.rng.IntN(25) {
	case 0: // heartbeats from an older incarnation, or at another liveness
		if len(nodes) > 0 {
			n := nodes[s.rng.IntN(len(nodes))]
			// The versions the node speaks (its record's), so a cluster
			// past version 1 refuses the probe for what it breaks.
			lo, hi := n.MinVersion, n.MaxVersion
			if s.chance(0.5) {
				commit(ledger.Heartbeat{Node: n.ID, Incarnation: n.Incarnation - 1, Liveness: n.Liveness, Now: now, MinVersion: lo, MaxVersion: hi}, ledger.ErrStaleIncarnation)
			} else {
				commit(ledger.Heartbeat{Node: n.ID, Incarnation: n.Incarnation, Liveness: n.Liveness + 1, Now: now, MinVersion: lo, MaxVersion: hi}, ledger.ErrStaleLiveness)
			}
		}
	case 1: // an expiry racing a heartbeat; a drain from another incarnation
		if len(nodes) > 0 {
			n := nodes[s.rng.IntN(len(nodes))]
			if s.chance(0.5) {
				commit(ledger.ExpireNode{Node: n.ID, Incarnation: n.Incarnation, Liveness: n.Liveness, Seq: n.Seq - 1, Now: now}, ledger.ErrConflict)
			} else {
				commit(ledger.SetDraining{Node: n.ID, Incarnation: n.Incarnation + 1, Draining: !n.Draining, Now: now}, ledger.ErrStaleIncarnation)
			}
		}
	case 2: // a grant over a valid owner (a takeover when Owned and not fenced)
		if sh, ok := pickShard(valid); ok {
			if n, ok := other(sh.Owner); ok {
				takeover := sh.State == ledger.ShardOwned && !st.Fenced(sh.Shard) && sh.Epoch%2 == 1
				commit(ledger.Grant{Shard: sh.Shard, ExpectedEpoch: sh.Epoch, Owner: n.ID, OwnerIncarnation: n.Incarnation,
					OwnerLiveness: n.Liveness, Takeover: takeover, Now: now}, ledger.ErrShardOwned)
			}
		}
	case 3: // grants of the unowned probe shard: stale epoch, empty owner, stale grantee
		if n, ok := other(""); ok {
			switch s.rng.IntN(3) {
			case 0:
				commit(ledger.Grant{Shard: probeShard, ExpectedEpoch: 1, Owner: n.ID, OwnerIncarnation: n.Incarnation,
					OwnerLiveness: n.Liveness, Now: now}, ledger.ErrStaleEpoch)
			case 1:
				commit(ledger.Grant{Shard: probeShard, Now: now}, ledger.ErrInvalid)
			default:
				commit(ledger.Grant{Shard: probeShard, Owner: n.ID, OwnerIncarnation: n.Incarnation,
					OwnerLiveness: n.Liveness + 1, Now: now}, ledger.ErrStaleLiveness)
			}
		}
	case 4: // a transfer to a grantee at a stale liveness
		if sh, ok := pickShard(append(valid, revoking...)); ok {
			if n, ok := other(sh.Owner); ok {
				commit(ledger.Transfer{Shard: sh.Shard, Epoch: sh.Epoch, From: sh.Owner, To: n.ID, ToIncarnation: n.Incarnation,
					ToLiveness: n.Liveness + 1, Now: now}, ledger.ErrStaleLiveness)
			}
		}
	case 5: // revokes: another epoch; of a shard not Owned
		if sh, ok := pickShard(valid); ok && s.chance(0.5) {
			commit(ledger.Revoke{Shard: sh.Shard, Epoch: sh.Epoch + 1, Now: now}, ledger.ErrStaleEpoch)
		} else if sh, ok := pickShard(revoking); ok && s.chance(0.5) {
			commit(ledger.Revoke{Shard: sh.Shard, Epoch: sh.Epoch, Now: now}, ledger.ErrConflict)
		} else {
			commit(ledger.Revoke{Shard: probeShard, Now: now}, ledger.ErrConflict)
		}
	case 6: // releases: another epoch; by another node; twice
		if sh, ok := pickShard(append(valid, revoking...)); ok && s.chance(0.7) {
			if s.chance(0.5) {
				commit(ledger.Release{Shard: sh.Shard, Epoch: sh.Epoch + 1, Owner: sh.Owner, Now: now}, ledger.ErrStaleEpoch)
			} else if n, ok := other(sh.Owner); ok {
				commit(ledger.Release{Shard: sh.Shard, Epoch: sh.Epoch, Owner: n.ID, Now: now}, ledger.ErrNotOwner)
			}
		} else {
			commit(ledger.Release{Shard: probeShard, Now: now}, ledger.ErrConflict)
		}
	case 7: // transfers: another epoch; from a node that is not the valid owner
		if sh, ok := pickShard(append(valid, revoking...)); ok {
			if n, ok := other(sh.Owner); ok {
				if s.chance(0.5) {
					commit(ledger.Transfer{Shard: sh.Shard, Epoch: sh.Epoch + 1, From: sh.Owner, To: n.ID, ToIncarnation: n.Incarnation,
						ToLiveness: n.Liveness, Now: now}, ledger.ErrStaleEpoch)
				} else {
					commit(ledger.Transfer{Shard: sh.Shard, Epoch: sh.Epoch, From: n.ID, To: n.ID, ToIncarnation: n.Incarnation,
						ToLiveness: n.Liveness, Now: now}, ledger.ErrNotOwner)
				}
			}
		} else if sh, ok := pickShard(invalid); ok && sh.State != ledger.ShardUnowned {
			if n, ok := other(""); ok {
				commit(ledger.Transfer{Shard: sh.Shard, Epoch: sh.Epoch, From: sh.Owner, To: n.ID, ToIncarnation: n.Incarnation,
					ToLiveness: n.Liveness, Now: now}, ledger.ErrNotOwner)
			}
		}
	case 8: // a start by another node
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, startable); ok {
				if n, ok := other(sh.Owner); ok {
					commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch, Owner: n.ID, Job: j.ID, Attempt: j.Attempt,
						Timeout: int64(time.Second), Now: now}, ledger.ErrNotOwner)
				}
			}
		}
	case 9: // a start on a Revoking shard
		if sh, ok := pickShard(revoking); ok {
			if j, ok := job(sh.Shard, startable); ok {
				commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch, Owner: sh.Owner, Job: j.ID, Attempt: j.Attempt,
					Timeout: int64(time.Second), Now: now}, ledger.ErrNotOwner)
			}
		}
	case 10: // a start at another epoch
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, startable); ok {
				commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch + 1, Owner: sh.Owner, Job: j.ID, Attempt: j.Attempt,
					Timeout: int64(time.Second), Now: now}, ledger.ErrStaleEpoch)
			}
		}
	case 11: // a start after the wrong attempt
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.State == ledger.JobPending && now >= j.NotBefore }); ok {
				commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch, Owner: sh.Owner, Job: j.ID, Attempt: j.Attempt + 1,
					Timeout: int64(time.Second), Now: now}, ledger.ErrWrongAttempt)
			}
		}
	case 12: // a finished job started again
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.State.Finished() }); ok {
				commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch, Owner: sh.Owner, Job: j.ID, Attempt: j.Attempt,
					Timeout: int64(time.Second), Now: now}, ledger.ErrJobFinished)
			}
		}
	case 13: // a second attempt while one runs
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.State == ledger.JobStarted && j.Epoch == sh.Epoch }); ok {
				commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch, Owner: sh.Owner, Job: j.ID, Attempt: j.Attempt,
					Timeout: int64(time.Second), Now: j.StartedAt}, ledger.ErrJobState)
			}
		}
	case 14: // a start before the backoff ends
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.State == ledger.JobPending }); ok {
				commit(ledger.JobStart{Shard: sh.Shard, Epoch: sh.Epoch, Owner: sh.Owner, Job: j.ID, Attempt: j.Attempt,
					Timeout: int64(time.Second), Now: j.NotBefore - 1}, ledger.ErrJobState)
			}
		}
	case 15: // a finish at another epoch
		if sh, ok := pickShard(append(valid, revoking...)); ok {
			if j, ok := job(sh.Shard, running(sh)); ok {
				commit(ledger.JobComplete{Shard: sh.Shard, Epoch: sh.Epoch + 1, Job: j.ID, Attempt: j.Attempt, Now: now}, ledger.ErrStaleEpoch)
			}
		}
	case 16: // a finish while the ownership is not valid
		// Of an attempt running at the shard's epoch, so that only the
		// ownership refuses it. Such attempts are rare (between an owner's
		// expiry or release and the next grant): every invalid shard is
		// searched.
		var cand []ledger.JobFail
		for _, sh := range invalid {
			for _, j := range st.Jobs(sh.Shard, ledger.JobStarted) {
				if running(sh)(j) {
					cand = append(cand, ledger.JobFail{Shard: sh.Shard, Epoch: sh.Epoch, Job: j.ID, Attempt: j.Attempt, Now: now})
				}
			}
		}
		if len(cand) > 0 {
			commit(cand[s.rng.IntN(len(cand))], ledger.ErrNotOwner)
		}
	case 17: // a finish of another attempt
		if sh, ok := pickShard(append(valid, revoking...)); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.State == ledger.JobStarted && j.Epoch == sh.Epoch }); ok {
				commit(ledger.JobComplete{Shard: sh.Shard, Epoch: sh.Epoch, Job: j.ID, Attempt: j.Attempt + 1, Now: now}, ledger.ErrWrongAttempt)
			}
		}
	case 18: // a finish of a finished job (a retry must learn it finished)
		if sh, ok := pickShard(append(valid, revoking...)); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.State.Finished() && j.Epoch == sh.Epoch }); ok {
				commit(ledger.JobComplete{Shard: sh.Shard, Epoch: sh.Epoch, Job: j.ID, Attempt: j.Attempt, Now: now}, ledger.ErrJobFinished)
			}
		}
	case 19: // an enqueue of a retained key
		if sh, ok := pickShard(append(valid, revoking...)); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool { return j.Key != "" && !j.State.Finished() }); ok {
				commit(ledger.JobEnqueue{Shard: sh.Shard, Key: j.Key, Type: "probe", Now: now}, nil)
			}
		}
	case 20: // application commands: another epoch; no valid owner
		if sh, ok := pickShard(append(valid, revoking...)); ok && s.chance(0.5) {
			commit(ledger.App{Shard: sh.Shard, Epoch: sh.Epoch + 1, Type: appType, Payload: []byte{3}, Now: now}, ledger.ErrStaleEpoch)
		} else if sh, ok := pickShard(invalid); ok && s.chance(0.5) {
			commit(ledger.App{Shard: sh.Shard, Epoch: sh.Epoch, Type: appType, Payload: []byte{3}, Now: now}, ledger.ErrNotOwner)
		} else {
			commit(ledger.App{Shard: probeShard, Type: appType, Payload: []byte{3}, Now: now}, ledger.ErrNotOwner)
		}
	case 21: // a fail of the last attempt must dead-letter: the checker's job model judges it
		if sh, ok := pickShard(valid); ok {
			if j, ok := job(sh.Shard, func(j ledger.JobRecord) bool {
				return j.State == ledger.JobStarted && j.Epoch == sh.Epoch && j.Attempt >= j.MaxAttempts
			}); ok {
				asOwner(sh.Owner, ledger.JobFail{Shard: sh.Shard, Epoch: sh.Epoch, Job: j.ID, Attempt: j.Attempt, Error: "probe", Now: now})
			}
		}
	case 22: // a used request id reused for another command (another shard)
		if len(s.requestIDs) > 0 {
			id := s.requestIDs[s.rng.IntN(len(s.requestIDs))]
			// Only an id the ledger still remembers (proposers' clocks
			// far apart age ids out early), at its own clock, so the
			// probe itself ages nothing out.
			if info, ok := st.Session(id); ok {
				commit(ledger.Session{ID: id, Command: ledger.App{Shard: probeShard, Type: appType, Payload: []byte{4}, Now: info.Now}}, history.ReusedIDErr(st.ActiveVersion()))
			}
		}
	case 23: // a cluster version going down
		if cur := st.Cluster(); cur.Name != "" && cur.Version > 1 {
			commit(ledger.ClusterConfig{Name: cur.Name, Partitions: cur.Partitions, Version: cur.Version - 1, Now: now}, ledger.ErrInvalid)
		}
	case 24: // a command gated at a newer cluster version than the active one
		if !st.VersionActive(ledger.VersionLogSettings) {
			commit(ledger.LogSettingsOf(st.Settings(), now), ledger.ErrVersion)
		}
	}
}
