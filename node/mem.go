package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/ledger/raftstore"
)

// MemNetwork is an in-process cluster for tests and examples: nodes started
// with the same MemNetwork in Config.Network run the real product — real
// memberlist gossip, the real Raft control group, the real ledger FSM,
// placement, planner and node agent — over in-process networks and
// in-memory storage instead of sockets and a data dir. Nothing is
// modelled: every commit goes through Raft and every membership change
// through gossip, with the delays, losses and partitions the two networks
// are told to inject. A MemNetwork opens no sockets, does no DNS and
// blocks only on channels and timers, so its nodes also run inside a
// testing/synctest bubble on the bubble's virtual clock. It is what the
// examples, the node tests, the tier-2 simulator (simulation/tier2) and
// scale benchmarks run on.
//
// Addresses: a node whose GossipAddr or RaftAddr is empty or a wildcard
// (DefaultConfig's "0.0.0.0:7946") gets a distinct IP literal of its own,
// the same one at every start of its NodeID. A node that gets its gossip
// address this way and has no Seeds is seeded with the gossip addresses
// of every other node started on the network before it; the first such
// node forms the cluster alone (BootstrapExpect 1) and the later ones join
// it (BootstrapExpect DefaultBootstrapExpect, so they never form a cluster
// of their own). Start the first node before the others (Start returns
// once the node is registered with the control group), as the examples
// do. An empty Profile is ProfileFast. Set the
// addresses, Seeds and BootstrapExpect yourself to start several voters
// at once; explicit addresses must be distinct IP literals with a port
// ("10.0.0.1:7946"), and the advertise addresses must be empty.
//
// Storage: DataDir is ignored. A node's Raft log, stable store, snapshots
// and incarnation counter live in the MemNetwork under its NodeID and
// survive Close and Crash, so starting the same NodeID again is a restart
// (same log, next incarnation). Forget drops them, as a lost disk would.
type MemNetwork struct {
	// Gossip carries memberlist traffic.
	Gossip *cluster.MemNetwork
	// Raft carries Raft and the control group's RPCs.
	Raft *cluster.RaftMemNetwork
	// OnApply, if set, is called on every node's apply goroutine after
	// each command its replica applies (ledger.FSM.OnApply, so each
	// command of a batch separately and log replays after a restart too),
	// with the node's id and incarnation. It must not block. Set it before
	// starting nodes; checkers use it to see every replica's log.
	OnApply func(node string, incarnation uint64, index uint64, cmd ledger.Command, res ledger.Result)

	mu     sync.Mutex
	stores map[string]*memStorage
	hosts  map[string]int // NodeID -> host number of its assigned addresses
	// wrap, when set (tests), wraps every backend started on the network.
	wrap func(backend) backend
}

// memStorage is one node id's storage in a MemNetwork.
type memStorage struct {
	inc     uint64
	log     *raft.InmemStore
	snaps   *raft.InmemSnapshotStore
	running bool
}

// NewMemNetwork returns an empty in-process cluster. Its networks inject
// no faults until told to; their loss and jitter decisions are seeded by
// 1 (set Gossip and Raft yourself, as simulation/tier2 does, for another
// seed).
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{Gossip: cluster.NewMemNetwork(1), Raft: cluster.NewRaftMemNetwork(1)}
}

// Ports of the addresses a MemNetwork assigns.
const (
	memGossipPort = 7946
	memRaftPort   = 7947
)

// autoAddr reports whether addr is for the MemNetwork to choose: empty,
// or a wildcard IP.
func autoAddr(addr string) bool {
	if addr == "" {
		return true
	}
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().IsUnspecified()
}

// hostAddr is the address of host number k (1, 2, ...) at port:
// 10.128.0.0/9, out of the way of tests that pick 10.0.0.x themselves.
func hostAddr(k int, port uint16) string {
	ip := netip.AddrFrom4([4]byte{10, 128 | byte(k>>16&0x7f), byte(k >> 8), byte(k)})
	return netip.AddrPortFrom(ip, port).String()
}

// place fills what the network chooses in cfg (see MemNetwork): addresses,
// seeds, BootstrapExpect and the profile.
func (t *MemNetwork) place(cfg Config) Config {
	if cfg.Profile == "" {
		cfg.Profile = ProfileFast
	}
	autoGossip := autoAddr(cfg.GossipAddr)
	if !autoGossip && !autoAddr(cfg.RaftAddr) {
		return cfg
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hosts == nil {
		t.hosts = make(map[string]int)
	}
	k, ok := t.hosts[cfg.NodeID]
	if !ok {
		k = len(t.hosts) + 1
		t.hosts[cfg.NodeID] = k
	}
	if autoAddr(cfg.RaftAddr) {
		cfg.RaftAddr = hostAddr(k, memRaftPort)
	}
	if !autoGossip {
		return cfg
	}
	cfg.GossipAddr = hostAddr(k, memGossipPort)
	if len(cfg.Seeds) == 0 {
		others := make([]int, 0, len(t.hosts))
		for id, h := range t.hosts {
			if id != cfg.NodeID {
				others = append(others, h)
			}
		}
		slices.Sort(others)
		for _, h := range others {
			cfg.Seeds = append(cfg.Seeds, hostAddr(h, memGossipPort))
		}
		// The first node forms the cluster alone; the others join it and
		// must never form one of their own. A node bootstraps only after
		// its join of the seeds has ended, but one expecting 1 voter whose
		// seeds did not answer would still form a cluster alone. Expecting
		// DefaultBootstrapExpect, a joining node bootstraps only if it sees
		// that many members none of which has Raft state — never while
		// the first node runs.
		cfg.BootstrapExpect = 1
		if len(others) > 0 {
			cfg.BootstrapExpect = DefaultBootstrapExpect
		}
	}
	return cfg
}

// Crash stops n as a crash would: its network endpoints vanish first, then
// the node stops without draining, leaving the cluster or removing itself
// from the control group. Its storage stays, so starting its NodeID again
// is a restart. n must have been started with t.
func (t *MemNetwork) Crash(n *Node) {
	t.Gossip.Close(n.cfg.GossipAddr)
	t.Raft.Transport(n.cfg.RaftAddr).Close()
	_ = t.Raft.StreamLayer(n.cfg.RaftAddr).Close()
	n.kill()
}

// Forget drops the storage of node id (it must not be running): its next
// start is a new node with an empty log and incarnation 1.
func (t *MemNetwork) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.stores[id]; s != nil && !s.running {
		delete(t.stores, id)
	}
}

// validate reports what Config.Validate finds wrong for a node on t.
// Empty and wildcard addresses are fine: Start assigns them (place).
func (t *MemNetwork) validate(c Config) []error {
	var errs []error
	if t.Gossip == nil || t.Raft == nil {
		errs = append(errs, errors.New("the Network needs both its Gossip and Raft networks (see NewMemNetwork)"))
	}
	for _, a := range []struct{ field, v string }{{"GossipAddr", c.GossipAddr}, {"RaftAddr", c.RaftAddr}} {
		if autoAddr(a.v) {
			continue
		}
		if _, err := netip.ParseAddrPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: with Network, want an IP literal with a port (or empty: the network assigns one): %v", a.field, a.v, err))
		}
	}
	if c.GossipAdvertise != "" || c.RaftAdvertise != "" {
		errs = append(errs, fmt.Errorf("GossipAdvertise %q, RaftAdvertise %q: must be empty with Network", c.GossipAdvertise, c.RaftAdvertise))
	}
	if c.GossipAddr == c.RaftAddr && !autoAddr(c.GossipAddr) {
		errs = append(errs, fmt.Errorf("GossipAddr and RaftAddr are both %q: want two addresses", c.GossipAddr))
	}
	return errs
}

// open takes node id's storage (creating it) and bumps its incarnation.
func (t *MemNetwork) open(id string) (*raftstore.Store, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stores == nil {
		t.stores = make(map[string]*memStorage)
	}
	s := t.stores[id]
	if s == nil {
		s = &memStorage{log: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
		t.stores[id] = s
	}
	if s.running {
		return nil, 0, fmt.Errorf("node: %q is already running on this network", id)
	}
	s.running = true
	s.inc++
	return &raftstore.Store{Log: s.log, Stable: s.log, Snapshots: s.snaps}, s.inc, nil
}

func (t *MemNetwork) release(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.stores[id]; s != nil {
		s.running = false
	}
}

// openStore opens the Raft stores: the data dir, or the MemNetwork' memory.
func (b *netBackend) openStore() (*raftstore.Store, error) {
	if b.cfg.diskless() {
		// Nothing shared with earlier processes of the id, on MemNetwork
		// too; the incarnation is claimed from the control group.
		return disklessStore(), nil
	}
	if t := b.cfg.Network; t != nil {
		st, inc, err := t.open(b.cfg.NodeID)
		b.inc = inc
		return st, err
	}
	if err := checkStoreBesideIdentity(b.cfg.DataDir); err != nil {
		return nil, err
	}
	st, err := raftstore.OpenStore(filepath.Join(b.cfg.DataDir, "raft"), raftstore.StoreOptions{})
	if err != nil {
		return nil, fmt.Errorf("node: open data dir: %w", err)
	}
	return st, nil
}

// checkStoreBesideIdentity refuses a data dir whose identity files exist
// but whose raft.db is missing or empty. The store is created before the
// identity on a node's first start, so this is damage: bbolt would create
// a blank store and the node would come back without its Raft term and
// vote — free to vote twice in a term it already voted in, which breaks
// Raft's one-leader-per-term guarantee — and with an empty log.
func checkStoreBesideIdentity(dataDir string) error {
	has, err := cluster.HasIdentity(dataDir)
	if err != nil || !has {
		return err
	}
	path := filepath.Join(dataDir, "raft", "raft.db")
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("node: open data dir: %w: %s is missing next to this node's identity in %s: starting would lose the node's Raft term, vote and log; %s",
			ledger.ErrStoreCorrupt, path, dataDir, dataDirAdvice)
	case err != nil:
		return fmt.Errorf("node: open data dir: %w", err)
	case fi.Mode().IsRegular() && fi.Size() == 0:
		return fmt.Errorf("node: open data dir: %w: %s is empty (0 bytes) next to this node's identity in %s: starting would lose the node's Raft term, vote and log; %s",
			ledger.ErrStoreCorrupt, path, dataDir, dataDirAdvice)
	}
	return nil
}

// dataDirAdvice ends the node's damaged-data-dir errors.
const dataDirAdvice = "restore the data dir from a backup, or remove the whole data dir and rejoin as a new member under a new node id (docs/operations.md, \"Damaged storage\")"

// closeStore closes the data dir's store, or hands the in-memory one back.
func (b *netBackend) closeStore() error {
	if b.cfg.diskless() {
		return nil
	}
	if t := b.cfg.Network; t != nil {
		t.release(b.cfg.NodeID)
		return nil
	}
	return b.store.Close()
}

// loadIdentity returns the node id and incarnation: from the data dir, or
// the one openStore took from the MemNetwork.
func (b *netBackend) loadIdentity() (string, uint64, error) {
	if b.cfg.Network != nil || b.cfg.diskless() {
		return b.cfg.NodeID, b.inc, nil
	}
	return loadIdentity(b.cfg.DataDir, b.cfg.NodeID)
}

// attachGossip puts the in-memory gossip transport into mc; nil t: no-op.
func (t *MemNetwork) attachGossip(mc *cluster.Config, cfg Config, cleanup *[]func()) error {
	if t == nil {
		return nil
	}
	tr, err := t.Gossip.NewTransport(cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("node: gossip: %w", err)
	}
	mc.Transport = tr
	*cleanup = append(*cleanup, func() { _ = tr.Shutdown() })
	return nil
}

// attachRaft puts the in-memory Raft transport and RPC stream layer into
// cc; nil t: no-op.
func (t *MemNetwork) attachRaft(cc *cluster.ControlConfig, cfg Config) {
	if t == nil {
		return
	}
	cc.Transport = t.Raft.Transport(cfg.RaftAddr)
	cc.StreamLayer = t.Raft.StreamLayer(cfg.RaftAddr)
}

// hook registers the MemNetwork' OnApply on the node's FSM; nil t: no-op.
func (t *MemNetwork) hook(f *ledger.FSM, id string, inc uint64) {
	if t == nil || t.OnApply == nil {
		return
	}
	f.OnApply(func(index uint64, c ledger.Command, r ledger.Result) { t.OnApply(id, inc, index, c, r) })
}

// stopControl stops the control group: leaving its configuration on a
// graceful close, as a crash would (no leave) otherwise.
func (b *netBackend) stopControl(ctx context.Context, leave bool) error {
	if c, ok := b.ctl.(*clusterControl); ok && (!leave || slices.Contains(b.ctl.Voters(), b.id)) {
		// A voter stopped gracefully keeps its place in the Raft
		// configuration: a rolling restart must not shrink or reshuffle
		// the voter set. If it never comes back, the leader replaces it
		// after DeadVoterTimeout (docs/control-group.md). A leader hands
		// leadership to a live voter first, so its planned stop costs a
		// TimeoutNow round instead of an election with every renewal
		// stalled; it skips the handover when no other voter is alive in
		// gossip (a whole-cluster stop), and gives up after one lease.
		if leave {
			hctx, cancel := context.WithTimeout(ctx, b.timing.Lease)
			to, err := c.g.HandOverLeadership(hctx)
			cancel()
			if b.cfg.Logger != nil {
				switch {
				case err != nil:
					b.cfg.Logger.Warn("node: leadership handover before stopping failed; the group elects a new leader", "to", to, "err", err)
				case to != "":
					b.cfg.Logger.Info("node: handed control-group leadership over before stopping", "to", to)
				}
			}
		}
		return c.close(ctx)
	}
	return b.ctl.Shutdown(ctx)
}

// close stops the control group without leaving its configuration.
func (c *clusterControl) close(ctx context.Context) error {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return c.g.Close(ctx)
}
