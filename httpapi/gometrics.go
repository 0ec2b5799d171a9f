package httpapi

import (
	"fmt"
	"strings"
	"sync/atomic"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// The go-metrics bridge: raft, raft-boltdb and memberlist (and a few of
// tenure's own shells) report through go-metrics' process-wide functions
// with dotted camelCase keys ("raft.commitTime", in milliseconds). The
// bridge is a go-metrics sink that looks every key up in bridgedSeries and
// feeds the Prometheus collector named there: snake_case, base units
// (seconds, bytes), _total on counters, a help text that says what the
// series means. A key not in the table is dropped and counted in
// tenure_gometrics_unmapped_total, so a library upgrade that adds one
// shows up (TestAgentMetricsLint fails on it) instead of leaking an
// unlinted name. docs/operations.md "Metrics" lists old → new names.

// bridgeKind is how a bridged key is exported.
type bridgeKind int

const (
	bridgeCounter   bridgeKind = iota // accumulates IncrCounter values
	bridgeGauge                       // the last SetGauge (or AddSample) value
	bridgeHistogram                   // observes each AddSample/MeasureSince value
)

// bridgedSeries is one go-metrics key's Prometheus series.
type bridgedSeries struct {
	key   string // go-metrics key, dot-joined, as emitted (no service prefix)
	name  string // Prometheus name
	kind  bridgeKind
	scale float64 // multiplies the emitted value (ms → s: 0.001); 0 means 1
	// label, when set, is the one go-metrics label kept (renamed to
	// labelAs), with its every value listed so the series exist from the
	// start; any other value is exported as "other".
	label, labelAs string
	values         []string
	buckets        []float64 // histograms; nil: secondsBuckets
	help           string
}

// Histogram buckets of bridged series.
var (
	// secondsBuckets spans 100 µs to ~6.6 s: an fsync is tens of µs to
	// tens of ms, an election a few hundred ms.
	secondsBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)
	// renewBuckets are finer (×1.5, 100 µs to ~2.5 s) for the renewal
	// latency `tenure bench idle` reports percentiles of.
	renewBuckets = prometheus.ExponentialBuckets(0.0001, 1.5, 26)
	countBuckets = prometheus.ExponentialBuckets(1, 2, 12)  // 1 … 2048 entries
	bytesBuckets = prometheus.ExponentialBuckets(64, 4, 10) // 64 B … 16 MiB
	msToSeconds  = 0.001                                    // go-metrics timers are milliseconds
)

// bridgeTable is every go-metrics key tenure's dependencies emit (raft
// v1.7.3, raft-boltdb/v2 v2.3.1, memberlist v0.5.4) and tenure's own.
var bridgeTable = []bridgedSeries{
	// Control group (cluster.ControlGroup; tenure's own).
	{key: "control.term", name: "tenure_control_term", kind: bridgeGauge, help: "The control group's Raft term as this voter last saw it at a leader change (0 on members, which run no Raft)."},
	{key: "control.leader", name: "tenure_control_leader", kind: bridgeGauge, help: "1 while this node is the control group's Raft leader, 0 otherwise."},
	// The committed-state stream (cluster/stream.go): a member's side, then a serving voter's.
	{key: "stream.lag_entries", name: "tenure_stream_lag_entries", kind: bridgeGauge, help: "On a member following the committed-state stream: log indexes its replica was behind the serving voter at the last reply (0 on voters)."},
	{key: "stream.lag_seconds", name: "tenure_stream_lag_seconds", kind: bridgeGauge, help: "On a member following the committed-state stream: seconds since its replica last had caught up with the serving voter."},
	{key: "stream.reconnects", name: "tenure_stream_reconnects_total", kind: bridgeCounter, help: "Times this member resumed its committed-state stream (on the next voter) after it broke."},
	{key: "stream.snapshots_received", name: "tenure_stream_snapshots_received_total", kind: bridgeCounter, help: "Snapshots this member restored from the stream because its applied index had left the voter's buffer."},
	{key: "stream.bytes_received", name: "tenure_stream_received_bytes_total", kind: bridgeCounter, help: "Entry and snapshot bytes this member received on the committed-state stream."},
	{key: "stream.subscribers", name: "tenure_stream_subscribers", kind: bridgeGauge, help: "On a voter or standby: Subscribe calls of members it holds now."},
	{key: "stream.bytes_sent", name: "tenure_stream_sent_bytes_total", kind: bridgeCounter, help: "On a voter or standby: entry and snapshot bytes it served on the committed-state stream."},
	{key: "stream.drops", name: "tenure_stream_refused_total", kind: bridgeCounter, help: "On a voter or standby: Subscribe calls refused (subscriber cap reached, or not serving the stream yet)."},
	{key: "shard.starts", name: "tenure_shard_starts_total", kind: bridgeCounter, label: "on", labelAs: "on",
		values: []string{"commit", "word"},
		help:   "Times this node started acting on a shard (a new shard or epoch), by what the start rested on: commit (its replica applied the grant or transfer) or word (the old owner's word relayed by the leader, before the Transfer applied; cluster version 6)."},
	{key: "control.unproven_members", name: "tenure_control_unproven_members", kind: bridgeGauge, help: "Members gossip lists alive that have not proven their id at their Raft address over TLS, so the control group ignores them (the leader's view; docs/security.md)."},
	{key: "control.conn_refused", name: "tenure_control_conn_refused_total", kind: bridgeCounter, label: "reason", labelAs: "reason",
		values: []string{"pending_per_port", "pending_per_source", "handshake", "inflight_rpcs", "revoked"},
		help:   "Connections and requests the Raft/RPC port refused before or at authentication, by reason: pending_per_port, pending_per_source (too many connections not yet authenticated), handshake (a failed TLS handshake or identity), inflight_rpcs (a connection waited for a free request slot), revoked (a peer on the committed deny-list, at its handshake or its connection's next use)."},
	{key: "cluster.raft.refused", name: "tenure_cluster_raft_refused_total", kind: bridgeCounter, label: "reason", labelAs: "reason",
		values: []string{"role", "id", "not_voter", "not_leader", "config", "malformed", "too_large", "snapshot_too_large"},
		help:   "Raft connections and messages this node refused (cluster/identity/raftguard.go), by reason: role (not a node certificate), id (a header id not the proven one), not_voter, not_leader, config (a carried configuration), malformed, too_large (a message over 64 MiB), snapshot_too_large (an InstallSnapshot over MaxInstallSnapshot)."},
	{key: "lease.renew", name: "tenure_lease_renew_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, buckets: renewBuckets, help: "Successful lease renewals of this node: time from asking the control group's leader to its answer after a quorum round."},

	// Raft: leadership.
	{key: "raft.state.leader", name: "tenure_raft_leader_transitions_total", kind: bridgeCounter, help: "Times this node became the control group's Raft leader."},
	{key: "raft.state.follower", name: "tenure_raft_follower_transitions_total", kind: bridgeCounter, help: "Times this node became a Raft follower."},
	{key: "raft.state.candidate", name: "tenure_raft_candidate_transitions_total", kind: bridgeCounter, help: "Times this node started a Raft election as candidate."},
	{key: "raft.transition.heartbeat_timeout", name: "tenure_raft_heartbeat_timeouts_total", kind: bridgeCounter, help: "Times this follower heard no leader within the heartbeat timeout and started an election."},
	{key: "raft.transition.leader_lease_timeout", name: "tenure_raft_leader_lease_timeouts_total", kind: bridgeCounter, help: "Times this leader stepped down because it could not reach a quorum within its leader lease."},
	{key: "raft.candidate.electSelf", name: "tenure_raft_candidate_elect_self_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time this candidate took to ask the voters for their votes."},
	{key: "raft.candidate.preElectSelf", name: "tenure_raft_candidate_pre_elect_self_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time this node took to ask the voters for their pre-votes."},
	{key: "raft.leader.lastContact", name: "tenure_raft_leader_last_contact_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On the leader: time since it last heard from each follower, sampled at every leader lease check."},
	{key: "raft.leader.oldestLogAge", name: "tenure_raft_leader_oldest_log_age_seconds", kind: bridgeGauge, scale: msToSeconds, help: "On the leader: age of the oldest entry in its log store (how much history a lagging follower can still catch up from)."},
	{key: "raft.peers", name: "tenure_raft_peers", kind: bridgeGauge, help: "Servers (voters and non-voters) in the latest Raft configuration, as the leader last set it."},
	{key: "raft.verify_leader", name: "tenure_raft_verify_leader_total", kind: bridgeCounter, help: "Leadership confirmations (quorum rounds) this leader ran."},

	// Raft: the write path.
	{key: "raft.apply", name: "tenure_raft_apply_total", kind: bridgeCounter, help: "Commands this leader accepted for commit."},
	{key: "raft.barrier", name: "tenure_raft_barriers_total", kind: bridgeCounter, help: "Barriers this leader issued (one per term before it proposes)."},
	{key: "raft.leader.dispatchLog", name: "tenure_raft_leader_dispatch_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On the leader: time to append a batch of new entries to its own log store, fsync included."},
	{key: "raft.leader.dispatchNumLogs", name: "tenure_raft_leader_dispatch_entries", kind: bridgeGauge, help: "On the leader: entries in the last batch it appended to its own log."},
	{key: "raft.commitTime", name: "tenure_raft_commit_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On the leader: time from appending an entry to its commit (a quorum has it on disk)."},
	{key: "raft.commitNumLogs", name: "tenure_raft_commit_entries", kind: bridgeGauge, help: "On the leader: entries committed in the last commit round."},
	{key: "raft.replication.appendEntries.rpc", name: "tenure_raft_replication_append_entries_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On the leader: round trip of an AppendEntries RPC to a follower, its fsync included (all followers)."},
	{key: "raft.replication.appendEntries.logs", name: "tenure_raft_replication_append_entries_total", kind: bridgeCounter, help: "On the leader: log entries it sent to followers."},
	{key: "raft.replication.heartbeat", name: "tenure_raft_replication_heartbeat_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On the leader: round trip of a heartbeat to a follower."},
	{key: "raft.replication.installSnapshot", name: "tenure_raft_replication_install_snapshot_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On the leader: time to send a snapshot to a follower that lagged past the log."},
	{key: "raft.rpc.appendEntries", name: "tenure_raft_rpc_append_entries_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On a follower: time to handle an AppendEntries RPC, fsync included."},
	{key: "raft.rpc.appendEntries.storeLogs", name: "tenure_raft_rpc_append_entries_store_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On a follower: time to write and fsync the entries of an AppendEntries RPC."},
	{key: "raft.rpc.appendEntries.processLogs", name: "tenure_raft_rpc_append_entries_process_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On a follower: time to hand the newly committed entries of an AppendEntries RPC to its state machine."},
	{key: "raft.rpc.processHeartbeat", name: "tenure_raft_rpc_heartbeat_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On a follower: time to handle a heartbeat."},
	{key: "raft.rpc.requestVote", name: "tenure_raft_rpc_request_vote_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time this voter took to answer a (pre-)vote request."},
	{key: "raft.rpc.installSnapshot", name: "tenure_raft_rpc_install_snapshot_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "On a follower: time to receive and install a snapshot from the leader."},

	// Raft: the state machine (the ledger) and snapshots.
	{key: "raft.fsm.apply", name: "tenure_raft_fsm_apply_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time the ledger took to apply one committed entry."},
	{key: "raft.fsm.applyBatch", name: "tenure_raft_fsm_apply_batch_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time the ledger took to apply a batch of committed entries."},
	{key: "raft.fsm.applyBatchNum", name: "tenure_raft_fsm_apply_batch_entries", kind: bridgeHistogram, buckets: countBuckets, help: "Committed entries per batch handed to the ledger."},
	{key: "raft.fsm.enqueue", name: "tenure_raft_fsm_enqueue_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time committed entries waited to be handed to the ledger's apply loop."},
	{key: "raft.fsm.store_config", name: "tenure_raft_fsm_store_config_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time the ledger took to record a Raft configuration change."},
	{key: "raft.fsm.snapshot", name: "tenure_raft_fsm_snapshot_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time the ledger took to start a snapshot (copy its state)."},
	{key: "raft.fsm.restore", name: "tenure_raft_fsm_restore_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time the ledger took to restore from a snapshot."},
	{key: "raft.fsm.lastRestoreDuration", name: "tenure_raft_fsm_last_restore_duration_seconds", kind: bridgeGauge, scale: msToSeconds, help: "Duration of the ledger's last restore from a snapshot."},
	{key: "raft.restore", name: "tenure_raft_snapshot_restores_total", kind: bridgeCounter, help: "Times this node restored its ledger from a snapshot."},
	{key: "raft.restoreUserSnapshot", name: "tenure_raft_user_snapshot_restore_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time an operator-supplied snapshot restore took."},
	{key: "raft.snapshot.takeSnapshot", name: "tenure_raft_snapshot_take_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to take a snapshot, end to end."},
	{key: "raft.snapshot.create", name: "tenure_raft_snapshot_create_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to create the snapshot file."},
	{key: "raft.snapshot.persist", name: "tenure_raft_snapshot_persist_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to write the ledger's state into the snapshot file."},
	{key: "raft.compactLogs", name: "tenure_raft_compact_logs_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to delete the log entries a snapshot covers."},
	{key: "raft.removeOldLogs", name: "tenure_raft_remove_old_logs_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to delete old log entries after a snapshot restore."},
	{key: "raft.thread.main.saturation", name: "tenure_raft_main_loop_saturation_ratio", kind: bridgeGauge, help: "Share of the last second Raft's main loop spent working (0–1)."},
	{key: "raft.thread.fsm.saturation", name: "tenure_raft_fsm_loop_saturation_ratio", kind: bridgeGauge, help: "Share of the last second the ledger's apply loop spent working (0–1)."},

	// raft-boltdb: the log store on disk.
	{key: "raft.boltdb.storeLogs", name: "tenure_raft_boltdb_store_logs_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to write a batch of log entries to the bolt log store, fsync included (the control group's fsync latency)."},
	{key: "raft.boltdb.getLog", name: "tenure_raft_boltdb_get_log_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time to read one log entry from the bolt log store."},
	{key: "raft.boltdb.logsPerBatch", name: "tenure_raft_boltdb_batch_entries", kind: bridgeHistogram, buckets: countBuckets, help: "Log entries per write to the bolt log store."},
	{key: "raft.boltdb.logSize", name: "tenure_raft_boltdb_entry_size_bytes", kind: bridgeHistogram, buckets: bytesBuckets, help: "Size of each log entry written to the bolt log store."},
	{key: "raft.boltdb.logBatchSize", name: "tenure_raft_boltdb_batch_size_bytes", kind: bridgeHistogram, buckets: bytesBuckets, help: "Size of each batch written to the bolt log store."},
	{key: "raft.boltdb.writeCapacity", name: "tenure_raft_boltdb_write_capacity_entries_per_second", kind: bridgeGauge, help: "Log entries per second the bolt log store could write at the last batch's speed."},
	{key: "raft.boltdb.freelistBytes", name: "tenure_raft_boltdb_freelist_bytes", kind: bridgeGauge, help: "Bytes of the bolt file's freelist."},
	{key: "raft.boltdb.freePageBytes", name: "tenure_raft_boltdb_free_page_bytes", kind: bridgeGauge, help: "Bytes in free pages of the bolt file (it never shrinks; docs/operations.md)."},
	{key: "raft.boltdb.numFreePages", name: "tenure_raft_boltdb_free_pages", kind: bridgeGauge, help: "Free pages in the bolt file."},
	{key: "raft.boltdb.numPendingPages", name: "tenure_raft_boltdb_pending_pages", kind: bridgeGauge, help: "Pages of the bolt file freed but still held by open read transactions."},
	{key: "raft.boltdb.openReadTxn", name: "tenure_raft_boltdb_open_read_transactions", kind: bridgeGauge, help: "Open read transactions on the bolt log store."},
	{key: "raft.boltdb.totalReadTxn", name: "tenure_raft_boltdb_read_transactions_total", kind: bridgeCounter, help: "Read transactions started on the bolt log store."},
	{key: "raft.boltdb.txstats.pageCount", name: "tenure_raft_boltdb_tx_pages", kind: bridgeGauge, help: "Pages the bolt log store's transactions hold."},
	{key: "raft.boltdb.txstats.pageAlloc", name: "tenure_raft_boltdb_tx_page_alloc_bytes", kind: bridgeGauge, help: "Bytes the bolt log store's transactions allocated for pages."},
	{key: "raft.boltdb.txstats.cursorCount", name: "tenure_raft_boltdb_tx_cursors_total", kind: bridgeCounter, help: "Cursors the bolt log store's transactions created."},
	{key: "raft.boltdb.txstats.nodeCount", name: "tenure_raft_boltdb_tx_nodes_total", kind: bridgeCounter, help: "B+tree nodes the bolt log store's transactions allocated."},
	{key: "raft.boltdb.txstats.nodeDeref", name: "tenure_raft_boltdb_tx_node_derefs_total", kind: bridgeCounter, help: "B+tree node dereferences in the bolt log store."},
	{key: "raft.boltdb.txstats.rebalance", name: "tenure_raft_boltdb_tx_rebalances_total", kind: bridgeCounter, help: "B+tree node rebalances in the bolt log store."},
	{key: "raft.boltdb.txstats.rebalanceTime", name: "tenure_raft_boltdb_tx_rebalance_seconds", kind: bridgeHistogram, scale: 1e-9, help: "Time the bolt log store's transactions spent rebalancing, per stats interval."},
	{key: "raft.boltdb.txstats.split", name: "tenure_raft_boltdb_tx_splits_total", kind: bridgeCounter, help: "B+tree node splits in the bolt log store."},
	{key: "raft.boltdb.txstats.spill", name: "tenure_raft_boltdb_tx_spills_total", kind: bridgeCounter, help: "B+tree node spills in the bolt log store."},
	{key: "raft.boltdb.txstats.spillTime", name: "tenure_raft_boltdb_tx_spill_seconds", kind: bridgeHistogram, scale: 1e-9, help: "Time the bolt log store's transactions spent spilling, per stats interval."},
	{key: "raft.boltdb.txstats.write", name: "tenure_raft_boltdb_tx_writes_total", kind: bridgeCounter, help: "Page writes of the bolt log store."},
	{key: "raft.boltdb.txstats.writeTime", name: "tenure_raft_boltdb_tx_write_seconds", kind: bridgeHistogram, scale: 1e-9, help: "Time the bolt log store spent writing pages, per stats interval."},

	// Raft's network transport.
	{key: "raft.net.getRPCType", name: "tenure_raft_net_rpc_type_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time Raft's transport waited for the type byte of an incoming RPC."},
	{key: "raft.net.rpcDecode", name: "tenure_raft_net_rpc_decode_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, label: "rpcType", labelAs: "rpc", values: raftRPCTypes, help: "Time Raft's transport took to decode an incoming RPC."},
	{key: "raft.net.rpcEnqueue", name: "tenure_raft_net_rpc_enqueue_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, label: "rpcType", labelAs: "rpc", values: raftRPCTypes, help: "Time an incoming RPC waited for Raft's main loop."},
	{key: "raft.net.rpcRespond", name: "tenure_raft_net_rpc_respond_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, label: "rpcType", labelAs: "rpc", values: raftRPCTypes, help: "Time Raft took to answer an incoming RPC after it was handed over."},

	// memberlist: gossip.
	{key: "memberlist.health.score", name: "tenure_memberlist_health_score", kind: bridgeGauge, help: "memberlist's awareness score: 0 healthy; higher while this node is slow to answer probes (it then probes less aggressively)."},
	{key: "memberlist.node.instances", name: "tenure_memberlist_nodes", kind: bridgeGauge, label: "node_state", labelAs: "state", values: []string{"alive", "suspect", "dead", "left"}, help: "Members this node's gossip knows, by state."},
	{key: "memberlist.msg.alive", name: "tenure_memberlist_alive_messages_total", kind: bridgeCounter, help: "Alive messages this node's gossip handled."},
	{key: "memberlist.msg.suspect", name: "tenure_memberlist_suspect_messages_total", kind: bridgeCounter, help: "Suspect messages this node's gossip handled."},
	{key: "memberlist.msg.dead", name: "tenure_memberlist_dead_messages_total", kind: bridgeCounter, help: "Dead messages this node's gossip handled."},
	{key: "memberlist.degraded.probe", name: "tenure_memberlist_degraded_probes_total", kind: bridgeCounter, help: "Probes that succeeded only through indirect peers or TCP (a sign of packet loss)."},
	{key: "memberlist.degraded.timeout", name: "tenure_memberlist_degraded_timeouts_total", kind: bridgeCounter, help: "Probes that timed out and missed acknowledgements."},
	{key: "memberlist.gossip", name: "tenure_memberlist_gossip_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time of one gossip round."},
	{key: "memberlist.probeNode", name: "tenure_memberlist_probe_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time of one failure-detector probe."},
	{key: "memberlist.pushPullNode", name: "tenure_memberlist_push_pull_duration_seconds", kind: bridgeHistogram, scale: msToSeconds, help: "Time of one full state exchange (push-pull) with a peer."},
	{key: "memberlist.queue.broadcasts", name: "tenure_memberlist_broadcast_queue_messages", kind: bridgeHistogram, buckets: countBuckets, help: "Messages waiting in the gossip broadcast queue, sampled."},
	{key: "memberlist.size.local", name: "tenure_memberlist_push_pull_local_bytes", kind: bridgeGauge, help: "Size of the state this node sent in its last push-pull."},
	{key: "memberlist.size.remote", name: "tenure_memberlist_push_pull_remote_bytes", kind: bridgeHistogram, buckets: bytesBuckets, help: "Size of the states peers sent in push-pulls."},
	{key: "memberlist.tcp.accept", name: "tenure_memberlist_tcp_accepts_total", kind: bridgeCounter, help: "TCP connections the gossip layer accepted."},
	{key: "memberlist.tcp.connect", name: "tenure_memberlist_tcp_connects_total", kind: bridgeCounter, help: "TCP connections the gossip layer opened."},
	{key: "memberlist.tcp.sent", name: "tenure_memberlist_tcp_sent_bytes_total", kind: bridgeCounter, help: "Bytes the gossip layer sent over TCP."},
	{key: "memberlist.udp.sent", name: "tenure_memberlist_udp_sent_bytes_total", kind: bridgeCounter, help: "Bytes the gossip layer sent over UDP."},
	{key: "memberlist.udp.received", name: "tenure_memberlist_udp_received_bytes_total", kind: bridgeCounter, help: "Bytes the gossip layer received over UDP."},
}

// raftRPCTypes are the rpcType label values of raft's transport.
var raftRPCTypes = []string{"AppendEntries", "Heartbeat", "RequestVote", "RequestPreVote", "InstallSnapshot", "TimeoutNow"}

// bridgeIgnoredPrefixes are keys dropped on purpose: raft's legacy copies
// of per-follower series with the follower's id in the key (the labelled
// series above carry the same observations).
var bridgeIgnoredPrefixes = []string{
	"raft.replication.appendEntries.rpc.",
	"raft.replication.appendEntries.logs.",
	"raft.replication.heartbeat.",
	"raft.replication.installSnapshot.",
}

// bridgeSink is the go-metrics sink that feeds the bridged collectors.
type bridgeSink struct {
	series   map[string]*bridgeCollector // by go-metrics key
	unmapped prometheus.Counter
	// lastUnmapped is the last key dropped (for the test's message).
	lastUnmapped atomic.Pointer[string]
}

// bridgeCollector is one bridged series' collector.
type bridgeCollector struct {
	s       bridgedSeries
	scale   float64
	counter *prometheus.CounterVec
	gauge   *prometheus.GaugeVec
	hist    *prometheus.HistogramVec
}

func newBridgeSink(table []bridgedSeries) (*bridgeSink, []prometheus.Collector, error) {
	b := &bridgeSink{series: make(map[string]*bridgeCollector, len(table))}
	b.unmapped = prometheus.NewCounter(prometheus.CounterOpts{Name: "tenure_gometrics_unmapped_total",
		Help: "go-metrics reports from raft, memberlist or bolt whose key the bridge does not know (dropped; httpapi/gometrics.go)."})
	cs := []prometheus.Collector{b.unmapped}
	for _, s := range table {
		if _, dup := b.series[s.key]; dup {
			return nil, nil, fmt.Errorf("metrics: bridge: key %q twice", s.key)
		}
		c := &bridgeCollector{s: s, scale: s.scale}
		if c.scale == 0 {
			c.scale = 1
		}
		var labels []string
		if s.labelAs != "" {
			labels = []string{s.labelAs}
		}
		switch s.kind {
		case bridgeCounter:
			c.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: s.name, Help: s.help}, labels)
			cs = append(cs, c.counter)
		case bridgeGauge:
			c.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: s.name, Help: s.help}, labels)
			cs = append(cs, c.gauge)
		case bridgeHistogram:
			buckets := s.buckets
			if buckets == nil {
				buckets = secondsBuckets
			}
			c.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: s.name, Help: s.help, Buckets: buckets}, labels)
			cs = append(cs, c.hist)
		}
		// Counters and gauges exist from the start (0), so a dashboard or
		// an alert sees 0, not "no data", before the first event. A
		// histogram appears at its first observation: ~20 lines each, and
		// most are the voters' (a member would export ~1,000 zero lines).
		values := s.values
		if s.labelAs == "" {
			values = []string{""}
		}
		for _, v := range values {
			if s.kind != bridgeHistogram {
				c.with(v)
			}
		}
		b.series[s.key] = c
	}
	return b, cs, nil
}

// with returns the child for label value v ("" without a label).
func (c *bridgeCollector) with(v string) (counter prometheus.Counter, gauge prometheus.Gauge, hist prometheus.Observer) {
	var lv []string
	if c.s.labelAs != "" {
		lv = []string{v}
	}
	switch {
	case c.counter != nil:
		counter = c.counter.WithLabelValues(lv...)
	case c.gauge != nil:
		gauge = c.gauge.WithLabelValues(lv...)
	default:
		hist = c.hist.WithLabelValues(lv...)
	}
	return counter, gauge, hist
}

// labelValue is the kept label's value among labels, "other" when it is
// not one of the listed values.
func (c *bridgeCollector) labelValue(labels []gometrics.Label) string {
	if c.s.labelAs == "" {
		return ""
	}
	for _, l := range labels {
		if l.Name == c.s.label {
			for _, v := range c.s.values {
				if v == l.Value {
					return v
				}
			}
			break
		}
	}
	return "other"
}

// lookup returns the collector of key, or nil (counted) when unknown.
func (b *bridgeSink) lookup(key []string) *bridgeCollector {
	k := strings.Join(key, ".")
	if c, ok := b.series[k]; ok {
		return c
	}
	for _, p := range bridgeIgnoredPrefixes {
		if strings.HasPrefix(k, p) {
			return nil
		}
	}
	b.unmapped.Inc()
	b.lastUnmapped.Store(&k)
	return nil
}

// record applies one report of value val, whatever method reported it:
// the table's kind decides.
func (b *bridgeSink) record(key []string, val float32, labels []gometrics.Label) {
	c := b.lookup(key)
	if c == nil {
		return
	}
	counter, gauge, hist := c.with(c.labelValue(labels))
	v := float64(val) * c.scale
	switch {
	case counter != nil:
		if v >= 0 {
			counter.Add(v)
		}
	case gauge != nil:
		gauge.Set(v)
	default:
		hist.Observe(v)
	}
}

func (b *bridgeSink) SetGauge(key []string, val float32) { b.record(key, val, nil) }
func (b *bridgeSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	b.record(key, val, labels)
}
func (b *bridgeSink) EmitKey(key []string, val float32)     { b.record(key, val, nil) }
func (b *bridgeSink) IncrCounter(key []string, val float32) { b.record(key, val, nil) }
func (b *bridgeSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	b.record(key, val, labels)
}
func (b *bridgeSink) AddSample(key []string, val float32) { b.record(key, val, nil) }
func (b *bridgeSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	b.record(key, val, labels)
}

var _ gometrics.MetricSink = (*bridgeSink)(nil)

// BridgedSeries returns every series the go-metrics bridge may export,
// name → type ("counter", "gauge", "histogram"); histograms appear only
// once observed, so a scrape may lack them.
func BridgedSeries() map[string]string {
	out := map[string]string{"tenure_gometrics_unmapped_total": "counter"}
	for _, s := range bridgeTable {
		out[s.name] = [...]string{bridgeCounter: "counter", bridgeGauge: "gauge", bridgeHistogram: "histogram"}[s.kind]
	}
	return out
}

// BridgeGoMetrics sends the go-metrics that raft, raft-boltdb and
// memberlist emit (through go-metrics' global sink) to reg under the
// names of bridgeTable (tenure_raft_*, tenure_memberlist_*,
// tenure_control_*). It replaces the process-wide go-metrics sink, so a
// process calls it once.
func BridgeGoMetrics(reg prometheus.Registerer) error {
	sink, cs, err := newBridgeSink(bridgeTable)
	if err != nil {
		return err
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("metrics: go-metrics bridge: %w", err)
		}
	}
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false // the Go collector covers the runtime
	cfg.EnableServiceLabel = false
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return fmt.Errorf("metrics: go-metrics global: %w", err)
	}
	return nil
}
