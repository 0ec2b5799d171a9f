package gossip_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/cluster/gossip"
)

// Two nodes on an in-memory network: start, subscribe, join, react to
// events, publish a health change, leave.
func ExampleNewMembership() {
	network := gossip.NewMemNetwork(1)
	start := func(id, addr string) *gossip.Membership {
		tr, err := network.NewTransport(addr)
		if err != nil {
			panic(err)
		}
		cfg := gossip.DefaultTestConfig()
		cfg.Name = id
		cfg.Transport = tr
		cfg.Seeds = []string{"10.0.0.1:7946"}
		m, err := gossip.NewMembership(cfg, gossip.Meta{Health: 1, RaftAddr: addr})
		if err != nil {
			panic(err)
		}
		return m
	}
	a := start("a", "10.0.0.1:7946")
	defer a.Shutdown()
	events := a.Subscribe(16)
	defer events.Close()

	b := start("b", "10.0.0.2:7946")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.Join(ctx, nil); err != nil {
		panic(err)
	}
	_ = b.UpdateMeta(func(m *gossip.Meta) { m.Health = 0.5 })
	_ = b.Leave(ctx)

	for batch := range events.C() {
		for _, e := range batch {
			fmt.Println(e.Kind, e.Member.ID, e.Member.State, e.Member.Health)
			if e.Member.ID == "b" && e.Kind == gossip.EventLeave {
				return
			}
		}
	}
}
