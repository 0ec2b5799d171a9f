package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/benchkit"

	"go.etcd.io/etcd/server/v3/embed"
)

// raftTimings are an etcd member's heartbeat and election timeouts.
type raftTimings struct {
	TickMs     uint
	ElectionMs uint
}

var (
	// defaultTimings are etcd's shipped defaults.
	defaultTimings = raftTimings{TickMs: 100, ElectionMs: 1000}
	// tunedTimings are the low-latency timings etcd's tuning guide allows on
	// a fast local network; they let the server grant a 1 s lease.
	tunedTimings = raftTimings{TickMs: 50, ElectionMs: 500}
)

// minLeaseTTL is the shortest lease an etcd server with these timings grants
// (etcdserver: ceil(3/2 · election ticks · heartbeat)); shorter requests are
// silently raised to it.
func (t raftTimings) minLeaseTTL() time.Duration {
	ticks := t.ElectionMs / t.TickMs
	d := time.Duration(3*ticks/2) * time.Duration(t.TickMs) * time.Millisecond
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

// etcdCluster is a 3-member etcd cluster embedded in this process, listening
// on loopback, with its data (fsync on, as shipped) under one directory.
type etcdCluster struct {
	members   []*embed.Etcd
	endpoints []string
}

// startEtcd starts three members and waits until all of them serve clients.
func startEtcd(ctx context.Context, dir string, t raftTimings) (*etcdCluster, error) {
	const n = 3
	addrs, err := benchkit.FreeLoopbackAddrs(2 * n)
	if err != nil {
		return nil, fmt.Errorf("peers: reserve ports: %w", err)
	}
	var urls []url.URL
	for _, a := range addrs {
		urls = append(urls, url.URL{Scheme: "http", Host: a})
	}
	peerURLs, clientURLs := urls[:n], urls[n:]
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peerURLs[i].String()))
	}
	c := &etcdCluster{}
	type started struct {
		i   int
		e   *embed.Etcd
		err error
	}
	ch := make(chan started, n)
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenPeerUrls = []url.URL{peerURLs[i]}
		cfg.AdvertisePeerUrls = []url.URL{peerURLs[i]}
		cfg.ListenClientUrls = []url.URL{clientURLs[i]}
		cfg.AdvertiseClientUrls = []url.URL{clientURLs[i]}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "tenure-bench-peers"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.TickMs = t.TickMs
		cfg.ElectionMs = t.ElectionMs
		cfg.Logger = "zap"
		cfg.LogLevel = "warn"
		cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
		go func(i int, cfg *embed.Config) {
			e, err := embed.StartEtcd(cfg)
			ch <- started{i, e, err}
		}(i, cfg)
	}
	c.members = make([]*embed.Etcd, n)
	var errs []error
	for range n {
		s := <-ch
		c.members[s.i] = s.e
		if s.err != nil {
			errs = append(errs, fmt.Errorf("peers: start etcd member m%d: %w", s.i, s.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.close()
		return nil, err
	}
	for i, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			c.close()
			return nil, fmt.Errorf("peers: etcd member m%d: %w", i, err)
		case <-time.After(60 * time.Second):
			c.close()
			return nil, fmt.Errorf("peers: etcd member m%d not ready after 60s (logs in %s)", i, dir)
		case <-ctx.Done():
			c.close()
			return nil, ctx.Err()
		}
		c.endpoints = append(c.endpoints, clientURLs[i].Host)
	}
	return c, nil
}

func (c *etcdCluster) close() {
	for _, e := range c.members {
		if e != nil {
			e.Close()
		}
	}
}
