package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// holderCommand is the hidden subcommand the benchmark re-executes itself
// with: a separate process that holds the election so it can be killed -9.
const holderCommand = "__holder"

// The holder's line protocol. It prints lineLeader once it holds the
// election; on reading lineResign from stdin it prints "stopped <unix ns>"
// at the instant it stops acting, resigns, prints lineResigned and exits.
// It exits when stdin closes, so it never outlives the benchmark.
const (
	lineLeader   = "leader"
	lineResign   = "resign"
	lineStopped  = "stopped"
	lineResigned = "resigned"
)

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// runHolder campaigns for the election and holds it until told to resign,
// killed, or stdin closes.
func runHolder(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet(holderCommand, flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated etcd client endpoints")
	ttl := fs.Int("ttl", 2, "session TTL in seconds")
	prefix := fs.String("prefix", "", "election prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoints == "" || *prefix == "" {
		return fmt.Errorf("peers: %s needs -endpoints and -prefix", holderCommand)
	}
	cli, err := newClient(strings.Split(*endpoints, ","))
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(*ttl))
	if err != nil {
		return err
	}
	e := concurrency.NewElection(s, *prefix)
	if err := e.Campaign(ctx, "holder"); err != nil {
		return err
	}
	fmt.Fprintln(stdout, lineLeader)
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if sc.Text() != lineResign {
			continue
		}
		fmt.Fprintf(stdout, "%s %d\n", lineStopped, time.Now().UnixNano())
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := e.Resign(rctx)
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, lineResigned)
		return s.Close()
	}
	return nil
}
