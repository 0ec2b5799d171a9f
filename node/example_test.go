package node_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/node"
)

// startNode starts a node on an in-process network: the real product
// (gossip, Raft control group, ledger, placement) over in-memory
// transports, which assign the node its addresses and seeds. Real
// deployments use node.DefaultConfig() with Seeds, DataDir and addresses
// instead of Network.
func startNode(ctx context.Context, net *node.MemNetwork, id, group string, sms map[string]node.StateMachine) *node.Node {
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.Group = id, group
	cfg.Network = net
	cfg.Profile = node.ProfileFast // 800 ms leases: a test's timing
	cfg.Partitions = 16
	cfg.StateMachines = sms
	n, err := node.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// closeAll stops a whole cluster at once, as a fleet shutdown does: nodes
// closed one by one would each wait for a quorum the earlier ones took
// away.
func closeAll(ctx context.Context, nodes ...*node.Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = n.Close(ctx) })
	}
	wg.Wait()
}

// ticks is an application state machine: how many coordination decisions
// were committed per tenant.
type ticks struct {
	mu sync.Mutex
	n  map[string]int
}

func newTicks() *ticks { return &ticks{n: make(map[string]int)} }

func (t *ticks) Apply(shard uint32, epoch, index uint64, payload []byte) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[string(payload)]++
	return []byte(fmt.Sprint(t.n[string(payload)])), nil
}
func (t *ticks) Snapshot() ([]byte, error) { return nil, nil }
func (t *ticks) Restore([]byte) error      { return nil }
func (t *ticks) get(tenant string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[tenant]
}

// A coordinator loop per tenant that runs only on the tenant shard's owner
// (the "leader-owned workers" recipe). Every node runs the same code; the
// loop runs on one node at a time, records each decision as a fenced
// command every replica applies, and moves to another node when its owner
// goes away.
func Example_leaderOwnedWorkerPerTenant() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	var nodes []*node.Node
	var states []*ticks
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		st := newTicks()
		states = append(states, st)
		nodes = append(nodes, startNode(ctx, net, id, "default", map[string]node.StateMachine{"WorkerTick": st}))
	}

	tenant := "tenant-42"
	shard := nodes[0].ShardFor(tenant)
	decisions := make(chan string, 10)
	for _, n := range nodes {
		go n.RunShard(ctx, shard, func(ctx context.Context, tok node.Token) error {
			// One coordination cycle: commit the decision, fenced by tok.
			// Side effects happen after the commit, with an idempotency key.
			if _, err := n.Propose(ctx, tok, "WorkerTick", []byte(tenant)); err != nil {
				return nil // lost the shard meanwhile: the next owner continues
			}
			decisions <- n.ID()
			<-ctx.Done() // keep the shard until ownership ends
			return nil
		})
	}
	first := <-decisions
	fmt.Println("coordinator runs on the owner:", first == nodes[0].Owner(shard))

	// The owner leaves; another node takes over and continues from the
	// committed state.
	for _, n := range nodes {
		if n.ID() == first {
			_ = n.Close(ctx)
		}
	}
	second := <-decisions
	fmt.Println("taken over by another node:", second != first)
	for i, n := range nodes {
		if n.ID() == second {
			fmt.Println("decisions committed for", tenant+":", states[i].get(tenant))
		}
	}
	closeAll(ctx, nodes...)
	// Output:
	// coordinator runs on the owner: true
	// taken over by another node: true
	// decisions committed for tenant-42: 2
}

// paymentProvider stands for an external system that deduplicates requests
// by idempotency key.
type paymentProvider struct{ seen map[string]bool }

func (p *paymentProvider) Charge(key string, cents int) {
	if p.seen[key] {
		fmt.Println("provider: duplicate", key, "ignored")
		return
	}
	p.seen[key] = true
	fmt.Println("provider: charged", cents, "with key", key)
}

// Idempotent job processing: enqueue with an idempotency key, commit the
// start before the side effect, perform the side effect with an
// idempotency key, commit the result. A job completes at most once.
func Example_idempotentJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := startNode(ctx, node.NewMemNetwork(), "node-a", "default", nil)
	defer n.Close(ctx)
	if err := n.WaitSettled(ctx); err != nil { // the node owns every shard
		log.Fatal(err)
	}
	provider := &paymentProvider{seen: make(map[string]bool)}

	spec := node.JobSpec{Key: "charge/order-123/payment-1", ShardKey: "customer-7", Payload: []byte("1999")}
	_, created, _ := n.Enqueue(ctx, spec)
	fmt.Println("first enqueue created a job:", created)
	_, created, _ = n.Enqueue(ctx, spec) // a retried request
	fmt.Println("second enqueue created a job:", created)

	shard := n.ShardFor("customer-7")
	tok, err := n.Token(shard)
	if err != nil {
		log.Fatal(err)
	}
	for _, job := range n.RunnableJobs(shard) {
		started, err := n.StartJob(ctx, tok, job) // 1. commit the intent
		if err != nil {
			continue
		}
		provider.Charge(started.Key, 1999)                     // 2. side effect, keyed
		done, err := n.CompleteJob(ctx, started, []byte("ok")) // 3. commit the result
		fmt.Println("job", done.Key, "is", done.State, err)
		_, err = n.CompleteJob(ctx, started, []byte("ok")) // a retry of step 3
		fmt.Println("completing again:", errors.Is(err, node.ErrJobState))
	}
	// Output:
	// first enqueue created a job: true
	// second enqueue created a job: false
	// provider: charged 1999 with key charge/order-123/payment-1
	// job charge/order-123/payment-1 is completed <nil>
	// completing again: true
}

// Request ids: a client that retries after a timeout sends the same id, so
// the retry answers the first try — a job without a key is created once,
// and created stays true for the request that created it. The id with
// another body is refused. ReadBarrier makes the read after it
// linearizable. Both need cluster version 5 (finalized shortly after a
// start: ReadBarrier answers ErrUnsupported until then).
func Example_requestIDs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := startNode(ctx, node.NewMemNetwork(), "node-a", "default", nil)
	defer n.Close(ctx)
	for err := n.ReadBarrier(ctx); err != nil; err = n.ReadBarrier(ctx) {
		if !errors.Is(err, node.ErrUnsupported) {
			log.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling the cluster version, within ctx
	}

	id := node.NewRequestID() // once per logical request, kept with it
	spec := node.JobSpec{ShardKey: "customer-7", Type: "receipt", Payload: []byte("order-123"), RequestID: id}
	first, created, _ := n.Enqueue(ctx, spec)
	fmt.Println("first try created a job:", created)
	again, created, _ := n.Enqueue(ctx, spec) // the retry after a timeout
	fmt.Println("retry created a job:", created, "- the same job:", again.ID == first.ID)
	spec.Payload = []byte("order-124")
	_, _, err := n.Enqueue(ctx, spec)
	fmt.Println("the id with another body:", errors.Is(err, node.ErrRequestIDReused))

	if err := n.ReadBarrier(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("jobs:", len(n.Jobs(node.JobQuery{})))
	// Output:
	// first try created a job: true
	// retry created a job: true - the same job: true
	// the id with another body: true
	// jobs: 1
}

// A cron job that runs on exactly one node of the cluster: the leader of
// the "daily-report" election. Its context ends before the leader's lease
// does, so a report never runs on two nodes at once.
func Example_singletonCron() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	a := startNode(ctx, net, "node-a", "default", nil)
	b := startNode(ctx, net, "node-b", "default", nil)
	defer closeAll(ctx, a, b)

	ran := make(chan string, 10)
	cron := func(n *node.Node) node.WorkFunc {
		return func(ctx context.Context, tok node.Token) error {
			tick := time.NewTicker(10 * time.Millisecond) // time.Hour*24 in real life
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
					ran <- n.ID() // generate the report, stamped with tok
				}
			}
		}
	}
	workCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range []*node.Node{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Election("daily-report").Run(workCtx, cron(n))
		}()
	}
	runs := map[string]int{}
	for range 3 {
		runs[<-ran]++
	}
	stop()
	wg.Wait()
	leader := a.Election("daily-report").Leader()
	fmt.Println("runs:", len(runs), "node(s); ran on the leader:", runs[leader] == 3)
	// Output:
	// runs: 1 node(s); ran on the leader: true
}

// One indexer per group: a group election's leader is always a member of
// that group, and each group has its own.
func Example_perGroupSingleton() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	var nodes []*node.Node
	for _, spec := range []struct{ id, group string }{
		{"eu-1", "eu"}, {"eu-2", "eu"}, {"us-1", "us"}, {"us-2", "us"},
	} {
		nodes = append(nodes, startNode(ctx, net, spec.id, spec.group, nil))
	}
	defer closeAll(ctx, nodes...)
	for _, n := range nodes {
		e, err := n.GroupElection(ctx, "indexer")
		if err != nil {
			log.Fatal(err)
		}
		leader, err := e.WaitLeader(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s sees the %s indexer on a %s node\n", n.ID(), n.Group(), strings.SplitN(leader, "-", 2)[0])
	}
	// Output:
	// eu-1 sees the eu indexer on a eu node
	// eu-2 sees the eu indexer on a eu node
	// us-1 sees the us indexer on a us node
	// us-2 sees the us indexer on a us node
}

// bus stands for a downstream system that fences writers: it remembers the
// newest token per shard and refuses messages carrying an older one.
type bus struct {
	mu     sync.Mutex
	newest map[uint32]node.Token
}

func (b *bus) Publish(tok node.Token, msg string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.newest[tok.Shard]; ok && cur.Newer(tok) {
		return fmt.Errorf("refused %s: token %s is older than %s", msg, tok, cur)
	}
	b.newest[tok.Shard] = tok
	return nil
}

// An outbox publisher: only the leader of the "outbox" election publishes,
// and it passes its fencing token downstream, so a deposed leader that
// wakes up late cannot publish.
func Example_outboxPublisher() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	a := startNode(ctx, net, "node-a", "default", nil)
	b := startNode(ctx, net, "node-b", "default", nil)
	downstream := &bus{newest: make(map[uint32]node.Token)}
	if err := a.WaitSettled(ctx); err != nil {
		log.Fatal(err)
	}

	outbox := a.Election("outbox")
	leaderID, _ := outbox.WaitLeader(ctx)
	leader, follower := a, b
	if leaderID == b.ID() {
		leader, follower = b, a
	}
	oldTok, _ := leader.Election("outbox").Token()
	fmt.Println("leader publishes:", downstream.Publish(oldTok, "msg-1"))

	// The leader goes away (here: a clean shutdown) and the other node
	// takes over with a newer token.
	_ = leader.Close(ctx)
	if _, err := follower.Election("outbox").WaitLeader(ctx); err != nil {
		log.Fatal(err)
	}
	newTok, _ := follower.Election("outbox").Token()
	fmt.Println("new leader publishes:", downstream.Publish(newTok, "msg-2"))
	// A stale publisher still holding the old token is refused downstream.
	err := downstream.Publish(oldTok, "msg-3")
	fmt.Println("stale publisher refused:", err != nil)
	_ = follower.Close(ctx)
	// Output:
	// leader publishes: <nil>
	// new leader publishes: <nil>
	// stale publisher refused: true
}

// A worker per owned shard: each shard's work runs on exactly one node at
// a time, started when the node acquires the shard and cancelled before it
// stops owning it.
func Example_perShardWorker() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := startNode(ctx, node.NewMemNetwork(), "node-a", "default", nil)
	defer n.Close(ctx)

	var mu sync.Mutex
	var handled []int
	started := make(chan struct{}, 16)
	workCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- n.RunPerShard(workCtx, func(ctx context.Context, tok node.Token) error {
			mu.Lock()
			handled = append(handled, int(tok.Shard))
			mu.Unlock()
			started <- struct{}{}
			<-ctx.Done() // process the shard's queue until ownership ends
			return nil
		})
	}()
	for range n.Partitions() {
		<-started
	}
	stop()
	fmt.Println("RunPerShard returned:", <-done)
	sort.Ints(handled)
	fmt.Println("shards handled:", len(handled), "first:", handled[0], "last:", handled[len(handled)-1])
	// Output:
	// RunPerShard returned: context canceled
	// shards handled: 16 first: 0 last: 15
}

// Config.Validate names every bad value.
func ExampleConfig_Validate() {
	cfg := node.DefaultConfig()
	cfg.NodeID = "node a"
	cfg.Profile = "turbo"
	cfg.DataDir = "/var/lib/tenure"
	cfg.RaftAdvertise = "10.0.0.7:7947"
	err := cfg.Validate()
	fmt.Println(errors.Is(err, node.ErrInvalidConfig))
	for _, e := range err.(*node.ConfigError).Errs {
		fmt.Println(e)
	}
	// Output:
	// true
	// NodeID "node a": contains ' ' (want printable characters without spaces or '/') (set $HOSTNAME or Config.NodeID)
	// Profile "turbo": want "fast", "default" or "safe"
	// RaftAddr "0.0.0.0:7947" / RaftAdvertise "10.0.0.7:7947" is not loopback and no TLS certificate is set: peers must prove who they are (set TLSCAFile, TLSCertFile and TLSKeyFile — `tenure tls init` writes them — or Insecure to run without)
	// GossipAddr "0.0.0.0:7946" / GossipAdvertise "" is not loopback and no gossip EncryptionKey is set: any process that reaches a seed could join and read the ledger (set EncryptionKey — `tenure keygen` makes one — or Insecure to run without)
}

// Subscribing to ownership events.
func ExampleNode_Subscribe() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := node.DefaultConfig()
	cfg.NodeID, cfg.Network, cfg.Partitions = "node-a", node.NewMemNetwork(), 1
	cfg.Profile = node.ProfileFast
	n, err := node.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := n.WaitSettled(ctx); err != nil {
		log.Fatal(err)
	}
	sub := n.Subscribe(16)
	defer sub.Close()
	// Close drains: the node stops acting on every shard (lost). Alone in
	// its cluster it has nobody to hand shards to, so no new owner follows.
	_ = n.Close(ctx)
	for ev := range sub.C() {
		fmt.Printf("%s shard=%d owner=%q\n", ev.Kind, ev.Shard, ev.Owner)
	}
	fmt.Println("dropped:", sub.Dropped())
	// Output:
	// owner-changed shard=0 owner="node-a"
	// acquired shard=0 owner="node-a"
	// lost shard=0 owner="node-a"
	// dropped: 0
}

// Reporting health: below the minimum score a node hands its shards and
// elections over and reports itself degraded.
func ExampleNode_SetHealth() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net := node.NewMemNetwork()
	a := startNode(ctx, net, "node-a", "default", nil)
	b := startNode(ctx, net, "node-b", "default", nil)
	defer closeAll(ctx, a, b)

	events := a.Subscribe(64)
	defer events.Close()
	_ = a.SetHealth(0.2, map[string]string{"queue_depth": "12000"})
	for len(a.Owned()) > 0 { // the control group moves node-a's shards away
		<-events.C()
	}
	_ = b.WaitSettled(ctx)
	fmt.Println("node-a owns", len(a.Owned()), "shards; node-b owns", len(b.Owned()))
	r := a.Health()
	fmt.Println(r.Status, r.Reasons)
	for _, c := range a.Candidates() {
		fmt.Printf("%s health=%.1f eligible=%v metadata=%v\n", c.ID, c.Health, c.Eligible, c.Metadata)
	}
	// Output:
	// node-a owns 0 shards; node-b owns 16
	// degraded [health score 0.20 below minimum 0.50]
	// node-a health=0.2 eligible=false metadata=map[queue_depth:12000]
	// node-b health=1.0 eligible=true metadata=map[]
}
