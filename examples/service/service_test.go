package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/examples/internal/proc"
	"github.com/tenurehq/tenure/node"
)

type svc struct {
	id, http string
	p        *proc.Proc
	c        *client.Client
}

// Three service processes on loopback; one is killed with SIGKILL. Its
// shards fail over, work and orders continue on the others, every order
// ships exactly once, and the store never accepted a write whose token was
// older than one it had already accepted for the shard, nor one epoch from
// two nodes.
func TestServiceFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example and starts three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := time.Now()
	bin := proc.Build(t, ".", "service")
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	dir := t.TempDir()
	db := filepath.Join(dir, "orders.db")
	var gossip []string
	var svcs []*svc
	for i := range 3 {
		gossip = append(gossip, proc.FreeAddr(t))
		svcs = append(svcs, &svc{id: fmt.Sprintf("s%d", i+1), http: proc.FreeAddr(t)})
	}
	for i, s := range svcs {
		s.p = proc.Start(t, s.id, bin, "-id", s.id, "-http", s.http, "-gossip", gossip[i], "-raft", proc.FreeAddr(t),
			"-seeds", strings.Join(gossip, ","), "-data", filepath.Join(dir, s.id), "-db", db, "-partitions", "8")
		c, err := client.New(s.http, client.Options{Retries: -1, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s.c = c
	}
	settled := func(from []*svc, dead string) func() bool {
		return func() bool {
			for _, s := range from {
				shards, err := s.c.Shards(ctx, client.ShardFilter{})
				if err != nil || len(shards) != 8 {
					return false
				}
				for _, sh := range shards {
					if sh.State != "owned" || !sh.Valid || sh.Owner == dead {
						return false
					}
				}
			}
			return true
		}
	}
	proc.WaitUntil(t, ctx, 60*time.Second, "three settled services", settled(svcs, ""))
	t.Logf("settled at %v", time.Since(start).Round(time.Millisecond))

	post := func(s *svc, key string) {
		// 503 (or no answer) during a failover: retry until it is served.
		var last string
		defer func() {
			if t.Failed() {
				t.Logf("order %s via %s: last answer %s", key, s.id, last)
			}
		}()
		proc.WaitUntil(t, ctx, 20*time.Second, "order "+key+" via "+s.id, func() bool {
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+s.http+"/orders/"+key, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				last = err.Error()
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			return resp.StatusCode == 200
		})
	}
	for i := range 20 {
		post(svcs[i%3], fmt.Sprintf("before-%d", i))
	}

	// Kill the node that owns the most shards.
	shards, err := svcs[0].c.Shards(ctx, client.ShardFilter{})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, sh := range shards {
		count[sh.Owner]++
	}
	victim := svcs[0]
	for _, s := range svcs {
		if count[s.id] > count[victim.id] {
			victim = s
		}
	}
	var victimShards []uint32
	var zombie []node.Token // the victim's tokens, replayed after the failover
	for _, sh := range shards {
		if sh.Owner == victim.id {
			victimShards = append(victimShards, sh.Shard)
			zombie = append(zombie, node.Token{Shard: sh.Shard, Epoch: sh.Epoch})
		}
	}
	t.Logf("20 orders at %v", time.Since(start).Round(time.Millisecond))
	killedAt := time.Now()
	victim.p.Kill()
	var rest []*svc
	for _, s := range svcs {
		if s != victim {
			rest = append(rest, s)
		}
	}
	for i := range 20 {
		post(rest[i%2], fmt.Sprintf("after-%d", i))
	}
	proc.WaitUntil(t, ctx, 30*time.Second, "the victim's shards to fail over", settled(rest, victim.id))
	t.Logf("killed %s (%d shards); failed over within %v", victim.id, len(victimShards), time.Since(killedAt).Round(time.Millisecond))

	store, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	proc.WaitUntil(t, ctx, 30*time.Second, "every order to ship", func() bool {
		var n int
		err := store.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE shipped_by IS NOT NULL`).Scan(&n)
		return err == nil && n == 40
	})
	var twice int
	if err := store.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE ships != 1`).Scan(&twice); err != nil || twice != 0 {
		t.Fatalf("orders not shipped exactly once: %d (%v)", twice, err)
	}
	// Work continued after the kill: a survivor wrote each victim shard at
	// a newer epoch.
	for _, sh := range victimShards {
		proc.WaitUntil(t, ctx, 10*time.Second, fmt.Sprintf("a survivor's write on shard %d", sh), func() bool {
			var n int
			err := store.QueryRowContext(ctx, `SELECT count(*) FROM writes WHERE shard = ? AND writer != ? AND epoch > (SELECT coalesce(max(epoch), 0) FROM writes WHERE shard = ? AND writer = ?)`,
				sh, victim.id, sh, victim.id).Scan(&n)
			return err == nil && n > 0
		})
	}
	t.Logf("shipped at %v", time.Since(start).Round(time.Millisecond))
	// A write from the dead owner arriving late (a paused process, a
	// delayed packet) carries its old token: the store refuses it.
	st, err := OpenStore(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tok := range zombie {
		if err := st.Fenced(ctx, tok, victim.id, "zombie", nil); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("a late write with %s's token %s: %v, want ErrStaleToken", victim.id, tok, err)
		}
	}
	checkWrites(t, store)
}

// checkWrites reads the store's write log in commit order: per shard, no
// write carries an epoch lower than one already accepted (no stale token
// accepted), and no epoch was written by two nodes.
func checkWrites(t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.Query(`SELECT id, shard, epoch, writer FROM writes ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type key struct {
		shard uint32
		epoch uint64
	}
	maxEpoch := map[uint32]uint64{}
	writer := map[key]string{}
	n := 0
	for rows.Next() {
		var id int64
		var shard uint32
		var epoch uint64
		var w string
		if err := rows.Scan(&id, &shard, &epoch, &w); err != nil {
			t.Fatal(err)
		}
		n++
		if epoch < maxEpoch[shard] {
			t.Errorf("write %d: shard %d epoch %d by %s accepted after epoch %d", id, shard, epoch, w, maxEpoch[shard])
		}
		maxEpoch[shard] = max(maxEpoch[shard], epoch)
		k := key{shard, epoch}
		if prev, ok := writer[k]; ok && prev != w {
			t.Errorf("write %d: shard %d epoch %d written by %s and %s", id, shard, epoch, prev, w)
		}
		writer[k] = w
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var refused int
	_ = db.QueryRow(`SELECT count(*) FROM refused`).Scan(&refused)
	t.Logf("%d fenced writes accepted over %d shards, %d refused as stale", n, len(maxEpoch), refused)
	if n == 0 {
		t.Fatal("no writes")
	}
}
