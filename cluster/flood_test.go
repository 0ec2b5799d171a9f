package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/rpc"
)

// The flood helper: run as a child process (TENURE_FLOOD_ADDR set), it
// opens TENURE_FLOOD_N idle TCP connections to the address, prints how
// many it opened and holds them until its stdin closes. A child of its own
// because one process may hold at most 20,000 files here (RLIMIT_NOFILE's
// hard limit), fewer than 20,000 connections plus the cluster.
func TestFloodHelper(t *testing.T) {
	addr := os.Getenv("TENURE_FLOOD_ADDR")
	if addr == "" {
		t.Skip("the flood helper runs only as TestIdleConnectionFlood's child")
	}
	n, _ := strconv.Atoi(os.Getenv("TENURE_FLOOD_N"))
	var conns []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, c)
	}
	fmt.Printf("dialed %d\n", len(conns))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		_ = c.Close()
	}
}

// TestIdleConnectionFlood: 20,000 idle connections (TCP, never a TLS
// hello) to the leader's Raft/RPC port do not stop replication or
// forwarded commands: pending connections are capped per port, the rest
// are closed at accept, and the cluster's own connections were
// established before.
func TestIdleConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("real network, 20,000 connections")
	}
	p := newTestPKI(t)
	// Leadership must not move on its own, flood or not.
	h := newSteadySecureHarness(t, p)
	defer h.closeAll()
	for i := 1; i <= 3; i++ {
		h.start(fmt.Sprintf("n%d", i))
	}
	h.waitConfig(30*time.Second, "n1:V n2:V n3:V")
	leader := h.waitLeader(30 * time.Second)
	var follower *testNode
	for _, n := range h.running() {
		if n != leader {
			follower = n
			break
		}
	}
	var want []string
	applyAll := func(from, to int) {
		for i := from; i < to; i++ {
			cmd := fmt.Sprintf("by:%s:flood-%d", follower.id, i)
			h.apply(follower, cmd, 20*time.Second)
			want = append(want, cmd)
		}
	}
	applyAll(0, 5) // the follower's connection to the leader is pooled now

	const children, perChild = 2, 10_000
	total := 0
	var kids []*exec.Cmd
	var stdins []io.WriteCloser
	defer func() {
		for i, k := range kids {
			_ = stdins[i].Close()
			_ = k.Wait()
		}
	}()
	for range children {
		k := exec.Command(os.Args[0], "-test.run=^TestFloodHelper$", "-test.count=1")
		k.Env = append(os.Environ(), "TENURE_FLOOD_ADDR="+leader.addr, "TENURE_FLOOD_N="+strconv.Itoa(perChild))
		in, err := k.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := k.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Start(); err != nil {
			t.Fatal(err)
		}
		kids, stdins = append(kids, k), append(stdins, in)
		line := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if s, ok := strings.CutPrefix(sc.Text(), "dialed "); ok {
					line <- s
				}
			}
			close(line)
		}()
		select {
		case s, ok := <-line:
			n, _ := strconv.Atoi(s)
			if !ok {
				t.Fatal("a flood child exited without reporting")
			}
			total += n
		case <-time.After(2 * time.Minute):
			t.Fatal("a flood child did not finish dialing in 2 minutes")
		}
	}
	t.Logf("%d idle connections opened to the leader %s", total, leader.addr)
	if total < 18_000 {
		t.Fatalf("only %d of %d connections opened: the flood did not happen", total, children*perChild)
	}
	// The node holds a bounded number of them: pending ones up to the
	// port's cap, the rest closed at accept (without the cap it held
	// one file and one goroutine per connection).
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		t.Logf("%d open files in the cluster's process during the flood", len(fds))
		if len(fds) > 2*rpc.DefaultMaxPendingConns {
			t.Errorf("%d open files during the flood: the pending-connection cap (%d) did not hold", len(fds), rpc.DefaultMaxPendingConns)
		}
	}
	start := time.Now()
	applyAll(5, 25) // forwarded over the pooled connection, replicated to all
	h.waitApplied(30*time.Second, want)
	t.Logf("20 forwarded commands committed and replicated everywhere in %v during the flood", time.Since(start))
	if l := h.leader(); l != leader {
		t.Fatalf("leadership moved from %s during the flood", leader.id)
	}
}
