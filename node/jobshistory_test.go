package node

// A linearizability check of the jobs API (docs/jobs.md, "What the answers
// promise"): three real nodes on a MemNetwork (real gossip, real Raft, the
// real ledger, planner and agent over in-memory networks), several clients
// enqueueing fresh and duplicate keys through every node, workers starting
// and completing the jobs on the shards' owners, and a fault loop that
// pauses (blackholes) or crashes the control-group leader and slows a
// follower's links. Every answer that claims linearizability — enqueue
// answers, start and complete answers, consistent reads — is recorded with
// its call and return times, and porcupine checks the history against a
// sequential model of one job per key. Replica reads claim nothing and are
// not checked.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenurehq/tenure/cluster"
	"github.com/tenurehq/tenure/ledger"
)

var jobsHistoryLong = flag.Bool("jobs-history-long", false, "run TestJobsAPIHistoryLinearizable for 2 minutes instead of 12 s")

// histKind is the kind of a recorded operation.
type histKind uint8

const (
	histEnqueue histKind = iota + 1
	histStart
	histComplete
	histRead
)

// histIn is an operation's input.
type histIn struct {
	kind    histKind
	key     string
	attempt uint32 // start/complete: the attempt the caller saw
}

// histOut is an operation's answer. unknown: the call failed, and it may or
// may not have taken effect (its return is the end of the history).
type histOut struct {
	unknown bool
	refused bool // a definite no (ErrQueueFull): nothing changed
	found   bool // reads: a job exists
	id      uint64
	created bool
	state   JobState
	attempt uint32
}

// histState is the model of one key's job. id 0: unknown yet (created by a
// call whose answer was lost).
type histState struct {
	exists  bool
	id      uint64
	state   JobState
	attempt uint32
}

// sameJob reports whether an answer's job id fits the model's.
func (s histState) sameJob(id uint64) bool { return s.id == 0 || s.id == id }

func (s histState) withID(id uint64) histState {
	if s.id == 0 {
		s.id = id
	}
	return s
}

// jobsModel is the sequential specification: one job per key, enqueued
// once (a duplicate answers the job as it is then, created false), started
// from pending (or from started: an attempt left behind at an older epoch)
// with the attempt the caller saw, completed once from started.
var jobsModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(histIn).key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		slices.Sort(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{histState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(histState), in.(histIn), out.(histOut)
		switch i.kind {
		case histEnqueue:
			switch {
			case o.unknown:
				if !s.exists {
					return []any{s, histState{exists: true, state: JobPending}}
				}
				return []any{s}
			case o.refused:
				if !s.exists {
					return []any{s}
				}
			case !s.exists:
				if o.created && o.state == JobPending && o.attempt == 0 {
					return []any{histState{exists: true, id: o.id, state: JobPending}}
				}
			case !o.created && s.sameJob(o.id) && o.state == s.state && o.attempt == s.attempt:
				return []any{s.withID(o.id)}
			}
			return nil
		case histStart:
			ok := s.exists && (s.state == JobPending || s.state == JobStarted) && s.attempt == i.attempt
			next := histState{exists: true, id: s.id, state: JobStarted, attempt: i.attempt + 1}
			switch {
			case o.unknown && ok:
				return []any{s, next}
			case o.unknown:
				return []any{s}
			case ok && s.sameJob(o.id) && o.state == JobStarted && o.attempt == i.attempt+1:
				return []any{next.withID(o.id)}
			}
			return nil
		case histComplete:
			ok := s.exists && s.state == JobStarted && s.attempt == i.attempt
			next := histState{exists: true, id: s.id, state: JobCompleted, attempt: i.attempt}
			switch {
			case o.unknown && ok:
				return []any{s, next}
			case o.unknown:
				return []any{s}
			case ok && s.sameJob(o.id) && o.state == JobCompleted && o.attempt == i.attempt:
				return []any{next.withID(o.id)}
			}
			return nil
		case histRead:
			switch {
			case o.unknown:
				return []any{s}
			case !o.found && !s.exists:
				return []any{s}
			case o.found && s.exists && s.sameJob(o.id) && o.state == s.state && o.attempt == s.attempt:
				return []any{s.withID(o.id)}
			}
			return nil
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(histIn), out.(histOut)
		name := map[histKind]string{histEnqueue: "enqueue", histStart: "start", histComplete: "complete", histRead: "read"}[i.kind]
		switch {
		case o.unknown:
			return fmt.Sprintf("%s(%s, attempt %d) → unknown", name, i.key, i.attempt)
		case o.refused:
			return fmt.Sprintf("%s(%s) → refused", name, i.key)
		case i.kind == histRead && !o.found:
			return fmt.Sprintf("read(%s) → not found", i.key)
		}
		return fmt.Sprintf("%s(%s, attempt %d) → job %d %s attempt %d created %v", name, i.key, i.attempt, o.id, o.state, o.attempt, o.created)
	},
	DescribeState: func(st any) string {
		s := st.(histState)
		if !s.exists {
			return "none"
		}
		return fmt.Sprintf("job %d %s attempt %d", s.id, s.state, s.attempt)
	},
}

// What a run of TestJobsAPIHistoryLinearizable must hold to be judged.
const (
	minEnqueues  = 200
	minCompletes = 20
	minReads     = 20
	minFaults    = 3
)

// history records operations with times from one monotonic origin.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// add records an operation called at call; an unknown answer's return is
// left open (set to the end of the history by close).
func (h *history) add(client int, in histIn, call int64, out histOut) {
	ret := h.now()
	if out.unknown {
		ret = -1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (h *history) close() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.now() + int64(time.Hour)
	for i := range h.ops {
		if h.ops[i].Return < 0 {
			h.ops[i].Return = end
		}
	}
	return h.ops
}

func jobOut(j Job, created bool) histOut {
	return histOut{found: true, id: j.ID, created: created, state: j.State, attempt: j.Attempt}
}

// histCluster is the cluster under test: nodes by id, replaced on restart.
type histCluster struct {
	t     *testing.T
	net   *MemNetwork
	mod   func(*Config)
	mu    sync.Mutex
	nodes map[string]*Node
	ids   []string
}

func (c *histCluster) live(r *rand.Rand) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var up []*Node
	for _, id := range c.ids {
		if n := c.nodes[id]; n != nil {
			up = append(up, n)
		}
	}
	return up[r.IntN(len(up))]
}

func (c *histCluster) leader() *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.ids {
		if n := c.nodes[id]; n != nil && n.Status().ControlLeader == id {
			return n
		}
	}
	return nil
}

func TestJobsAPIHistoryLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TENURE_HISTORY_SEED"); s != "" {
		_, _ = fmt.Sscan(s, &seed)
	}
	run := 12 * time.Second
	if *jobsHistoryLong {
		run = 2 * time.Minute
	}
	t.Logf("seed %d (TENURE_HISTORY_SEED=%d reproduces the fault pattern, not the interleaving), %v of operations", seed, seed, run)
	rng := rand.New(rand.NewPCG(seed, 1))

	// The run lasts `run`, longer (up to 3×) until enough happened to
	// judge on a loaded machine.
	ctx, cancelAll := context.WithTimeout(context.Background(), 3*run+2*time.Minute)
	defer cancelAll()
	net := NewMemNetwork()
	net.Raft = cluster.NewRaftMemNetwork(int64(seed))
	mod := func(c *Config) {
		c.Profile = ProfileFast
		c.MaxPendingJobs = 10_000 // the agent's default
		c.JobTimeout = time.Hour  // attempts are re-offered only after an owner change
	}
	hc := &histCluster{t: t, net: net, mod: mod, nodes: map[string]*Node{}, ids: []string{"a", "b", "c"}}
	for _, id := range hc.ids {
		hc.nodes[id] = startMem(t, net, id, mod)
	}
	for _, id := range hc.ids {
		if err := hc.nodes[id].WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !waitTrue(ctx, func() bool {
		return hc.nodes["a"].be.(*netBackend).fsm.State().VersionActive(ledger.MaxClusterVersion)
	}) {
		t.Fatalf("cluster version %d never became active", ledger.MaxClusterVersion)
	}

	h := &history{start: time.Now()}
	runCtx, stopRun := context.WithTimeout(ctx, 3*run)
	defer stopRun()
	var wg sync.WaitGroup

	// Workers: every node runs every shard it acts on.
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	worker := func(n *Node, client int) {
		defer wg.Done()
		_ = n.RunPerShard(workCtx, func(ctx context.Context, tok Token) error {
			for ctx.Err() == nil {
				for _, j := range n.RunnableJobs(tok.Shard) {
					if j.Key == "" { // keyless jobs are checked by count, not by the model
						if started, err := n.StartJob(ctx, tok, j); err == nil {
							_, _ = n.CompleteJob(ctx, started, nil)
						}
						continue
					}
					call := h.now()
					started, err := n.StartJob(ctx, tok, j)
					if err != nil {
						h.add(client, histIn{kind: histStart, key: j.Key, attempt: j.Attempt}, call, histOut{unknown: true})
						continue
					}
					h.add(client, histIn{kind: histStart, key: j.Key, attempt: j.Attempt}, call, jobOut(started, false))
					call = h.now()
					done, err := n.CompleteJob(ctx, started, nil)
					out := jobOut(done, false)
					out.unknown = err != nil
					h.add(client, histIn{kind: histComplete, key: j.Key, attempt: started.Attempt}, call, out)
				}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
			return nil
		})
	}
	startWorker := func(n *Node, client int) { wg.Add(1); go worker(n, client) }
	for i, id := range hc.ids {
		startWorker(hc.nodes[id], 100+i)
	}

	// Clients: keys advance in a window so that every key sees its
	// enqueue, duplicates while pending and started, and after completion.
	const clients = 6
	var keyMu sync.Mutex
	nextKey := 0
	keyFor := func(r *rand.Rand) string {
		keyMu.Lock()
		defer keyMu.Unlock()
		if r.IntN(6) == 0 {
			nextKey++
		}
		return fmt.Sprintf("h-%d", max(0, nextKey-r.IntN(8)))
	}
	enqueue := func(n *Node, spec JobSpec) (histOut, error) {
		cctx, cancel := context.WithTimeout(runCtx, 3*time.Second)
		defer cancel()
		j, created, err := n.Enqueue(cctx, spec)
		switch {
		case errors.Is(err, ErrQueueFull):
			return histOut{refused: true}, nil
		case err != nil:
			return histOut{unknown: true}, err
		}
		return jobOut(j, created), nil
	}
	// enqueueOnce records one call.
	enqueueOnce := func(n *Node, c int, key string, id RequestID) {
		call := h.now()
		out, _ := enqueue(n, JobSpec{Key: key, ShardKey: key, Type: "h", RequestID: id})
		h.add(c, histIn{kind: histEnqueue, key: key}, call, out)
	}
	var ridMu sync.Mutex
	ridChecks, ridReplays := 0, 0
	// retryEnqueue sends one request twice with one request id, through
	// two nodes: the logical call runs from the first send to the last
	// answer, and a second answer repeats the first one exactly.
	retryEnqueue := func(r *rand.Rand, c int, key string) {
		id := NewRequestID()
		spec := JobSpec{Key: key, ShardKey: key, Type: "h", RequestID: id}
		call := h.now()
		first, _ := enqueue(hc.live(r), spec)
		second, err := enqueue(hc.live(r), spec)
		if errors.Is(err, ErrRequestIDReused) {
			t.Errorf("seed %d: key %s: a retry with the same body was refused: %v", seed, key, err)
		}
		switch {
		case first.unknown:
			h.add(c, histIn{kind: histEnqueue, key: key}, call, second)
		default:
			h.add(c, histIn{kind: histEnqueue, key: key}, call, first)
			if !second.unknown {
				ridMu.Lock()
				ridChecks++
				ridMu.Unlock()
				if second != first {
					t.Errorf("seed %d: key %s request %s: the retry answered %+v, the first try %+v", seed, key, id, second, first)
				}
			}
		}
	}
	type keylessAnswer struct {
		id      RequestID
		answers []histOut
	}
	var keylessMu sync.Mutex
	var keylessAll []keylessAnswer
	// keyless enqueues a job without a key twice under one request id:
	// one job, created true in both answers.
	keyless := func(r *rand.Rand, c int) {
		id := NewRequestID()
		spec := JobSpec{ShardKey: "keyless", Type: "kl", Payload: id[:], RequestID: id}
		a := keylessAnswer{id: id}
		for range 2 {
			out, _ := enqueue(hc.live(r), spec)
			if !out.unknown {
				a.answers = append(a.answers, out)
			}
		}
		keylessMu.Lock()
		keylessAll = append(keylessAll, a)
		keylessMu.Unlock()
		_ = c
	}
	var cwg sync.WaitGroup
	for c := range clients {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(c)+2))
			for runCtx.Err() == nil {
				key := keyFor(r)
				switch x := r.IntN(10); {
				case x < 4: // an enqueue, fresh or duplicate
					enqueueOnce(hc.live(r), c, key, RequestID{})
				case x < 6: // a request-id retry through another node
					retryEnqueue(r, c, key)
				case x < 7: // a keyless request-id retry: one job
					keyless(r, c)
				default: // a consistent read
					n := hc.live(r)
					cctx, cancel := context.WithTimeout(runCtx, 3*time.Second)
					call := h.now()
					err := n.ReadBarrier(cctx)
					cancel()
					in := histIn{kind: histRead, key: key}
					if err != nil {
						continue // no barrier: the read claims nothing
					}
					j, err := n.JobByKey(key, key)
					switch {
					case errors.Is(err, ErrJobNotFound):
						h.add(c, in, call, histOut{})
					case err != nil:
						t.Errorf("read %s: %v", key, err)
					default:
						h.add(c, in, call, jobOut(j, false))
					}
				}
			}
		}()
	}

	// Faults: pause or crash the leader, slow a follower.
	faults := 0
	enough := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := map[histKind]int{}
		for _, op := range h.ops {
			n[op.Input.(histIn).kind]++
		}
		return n[histEnqueue] >= minEnqueues && n[histComplete] >= minCompletes && n[histRead] >= minReads && faults >= minFaults
	}
	for runCtx.Err() == nil {
		if time.Since(h.start) >= run && enough() {
			stopRun()
			break
		}
		select {
		case <-runCtx.Done():
			continue
		case <-time.After(time.Duration(800+rng.IntN(800)) * time.Millisecond):
		}
		ld := hc.leader()
		if ld == nil {
			continue
		}
		faults++
		switch rng.IntN(3) {
		case 0: // pause: the host vanishes, then comes back
			net.Gossip.Partition([]string{ld.cfg.GossipAddr})
			net.Raft.Blackhole(ld.cfg.RaftAddr)
			net.Raft.Isolate(ld.cfg.RaftAddr)
			time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond) // the pause itself, not a wait for a condition
			net.Gossip.Heal()
			net.Raft.Heal()
		case 1: // crash and restart
			id := ld.ID()
			hc.mu.Lock()
			hc.nodes[id] = nil
			hc.mu.Unlock()
			net.Crash(ld)
			n := startMem(t, net, id, mod)
			hc.mu.Lock()
			hc.nodes[id] = n
			hc.mu.Unlock()
			startWorker(n, 200+faults)
		case 2: // a slow follower: its replica lags
			for _, id := range hc.ids {
				hc.mu.Lock()
				n := hc.nodes[id]
				hc.mu.Unlock()
				if n != nil && n != ld {
					net.Raft.SetLink(ld.cfg.RaftAddr, n.cfg.RaftAddr, cluster.Link{Delay: 40 * time.Millisecond, Jitter: 40 * time.Millisecond})
					time.Sleep(time.Duration(500+rng.IntN(500)) * time.Millisecond) // the fault's duration
					net.Raft.SetLink(ld.cfg.RaftAddr, n.cfg.RaftAddr, cluster.Link{})
					break
				}
			}
		}
	}
	cwg.Wait()
	stopWork()
	wg.Wait()

	// Every keyless request created one job, and said so in every answer.
	var survivor *Node
	for _, id := range hc.ids {
		if n := hc.nodes[id]; n != nil {
			survivor = n
		}
	}
	if err := survivor.ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	perPayload := map[string]int{}
	for _, j := range survivor.Jobs(JobQuery{}) {
		if j.Type == "kl" {
			perPayload[string(j.Payload)]++
		}
	}
	keylessChecked := 0
	for _, a := range keylessAll {
		if n := perPayload[string(a.id[:])]; n > 1 {
			t.Errorf("seed %d: keyless request %s created %d jobs", seed, a.id, n)
		}
		for _, o := range a.answers {
			keylessChecked++
			if !o.created || o.id != a.answers[0].id {
				t.Errorf("seed %d: keyless request %s answered %+v after %+v: want the one job, created", seed, a.id, o, a.answers[0])
			}
		}
	}
	t.Logf("%d request-id retries compared with their first answer, %d keyless answers checked", ridChecks, keylessChecked)
	_ = ridReplays

	ops := h.close()
	counts := map[histKind]int{}
	unknown := 0
	for _, op := range ops {
		counts[op.Input.(histIn).kind]++
		if op.Output.(histOut).unknown {
			unknown++
		}
	}
	t.Logf("%d operations (%d enqueues, %d starts, %d completes, %d consistent reads; %d unknown), %d faults",
		len(ops), counts[histEnqueue], counts[histStart], counts[histComplete], counts[histRead], unknown, faults)
	if counts[histEnqueue] < minEnqueues || counts[histComplete] < minCompletes || counts[histRead] < minReads || faults < minFaults {
		t.Fatalf("seed %d: too little happened to judge in %v (want ≥ %d enqueues, %d completes, %d consistent reads, %d faults)",
			seed, 3*run, minEnqueues, minCompletes, minReads, minFaults)
	}
	res, info := porcupine.CheckOperationsVerbose(jobsModel.ToModel(), ops, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("seed %d: the linearizability check timed out", seed)
	default:
		out := filepath.Join(t.TempDir(), "history.html")
		if dir := os.Getenv("TENURE_HISTORY_DIR"); dir != "" {
			out = filepath.Join(dir, fmt.Sprintf("jobs-history-%d.html", seed))
		}
		if err := porcupine.VisualizePath(jobsModel.ToModel(), info, out); err == nil {
			t.Logf("visualization: %s", out)
		}
		t.Fatalf("seed %d: the jobs API history is not linearizable (%d operations); %s", seed, len(ops), describeViolation(ops))
	}
}

// describeViolation names the keys whose operations have no
// linearization, with the first one's operations in call order.
func describeViolation(ops []porcupine.Operation) string {
	m := jobsModel.ToModel()
	var bad []string
	var first []porcupine.Operation
	for _, part := range m.Partition(ops) {
		if porcupine.CheckOperations(m, part) {
			continue
		}
		bad = append(bad, part[0].Input.(histIn).key)
		if first == nil {
			first = slices.Clone(part)
		}
	}
	slices.SortFunc(first, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	s := fmt.Sprintf("%d keys fail: %v", len(bad), bad[:min(len(bad), 10)])
	if first != nil {
		s += "\nfirst failing key:"
		for _, op := range first {
			ret := "open"
			if op.Return < int64(time.Hour) {
				ret = time.Duration(op.Return).String()
			}
			s += fmt.Sprintf("\n  client %3d  %-10v … %-10s %s", op.ClientId, time.Duration(op.Call), ret, m.DescribeOperation(op.Input, op.Output))
		}
	}
	return s
}
